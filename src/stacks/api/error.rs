//! [`ApiError`]: a [`StackError`] (or a store/state error) as the API's `{"code","message"}`
//! body with its HTTP status.

use super::*;

/// An error answer: status and `{"code","message"}`, plus `Allow` (405)
/// or `Retry-After` (429).
pub(super) struct ApiError {
    pub(super) status: StatusCode,
    pub(super) code: &'static str,
    pub(super) message: String,
    pub(super) allow: Option<&'static str>,
    pub(super) retry_after: Option<u64>,
}

impl ApiError {
    pub(super) fn new(
        status: StatusCode,
        code: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            allow: None,
            retry_after: None,
        }
    }
}

impl From<StackError> for ApiError {
    /// The status of each kind; a state error worth retrying
    /// ([`crate::state::StateError::retry_after`]) is 503 `UNAVAILABLE`
    /// with `Retry-After`.
    fn from(e: StackError) -> ApiError {
        if let StackError::State(s) = &e
            && let Some(secs) = s.retry_after()
        {
            let mut answer = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "UNAVAILABLE",
                e.to_string(),
            );
            answer.retry_after = Some(secs);
            return answer;
        }
        let (status, code) = match &e {
            StackError::Invalid(_) => (StatusCode::BAD_REQUEST, "INVALID"),
            StackError::NotFound(_) => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            StackError::Conflict(_) => (StatusCode::CONFLICT, "CONFLICT"),
            StackError::Denied(_) => (StatusCode::FORBIDDEN, "DENIED"),
            StackError::Refused(_) => (StatusCode::UNPROCESSABLE_ENTITY, "REFUSED"),
            StackError::Image(_) => (StatusCode::UNPROCESSABLE_ENTITY, "IMAGE_INVALID"),
            StackError::State(_) | StackError::Other(_) => {
                tracing::error!(error = %e, "stacks API internal error");
                (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL")
            }
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl From<crate::state::StateError> for ApiError {
    fn from(e: crate::state::StateError) -> ApiError {
        StackError::from(e).into()
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> ApiError {
        StackError::from(e).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut res = (
            self.status,
            axum::Json(json!({ "code": self.code, "message": self.message })),
        )
            .into_response();
        if let Some(allow) = self.allow {
            res.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        if let Some(secs) = self.retry_after {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StateError;

    #[test]
    fn a_commit_that_lost_the_race_too_long_is_503_with_retry_after() {
        let res = ApiError::from(StackError::State(StateError::Contention(40))).into_response();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(res.headers()[header::RETRY_AFTER], "1");
        let other = ApiError::from(StackError::State(StateError::NotFound("x".into())));
        assert_ne!(other.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(other.retry_after, None);
    }
}
