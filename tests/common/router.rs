//! In-process requests to the router (`tower::ServiceExt::oneshot`), no sockets,
//! and the assertions every endpoint test shares.

use std::collections::BTreeSet;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;

/// A response, whole.
#[derive(Debug)]
pub struct Reply {
    /// Status code.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl Reply {
    /// Header `name`; panics when absent or not text.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("missing header {name}: {:?}", self.headers))
            .to_str()
            .unwrap()
    }

    /// Every header name.
    pub fn header_names(&self) -> BTreeSet<String> {
        self.headers
            .keys()
            .map(|k| k.as_str().to_string())
            .collect()
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    /// Asserts the status and the `Docker-Distribution-API-Version` header.
    pub fn status(&self, want: u16) -> &Reply {
        assert_eq!(
            self.status.as_u16(),
            want,
            "{:?} {}",
            self.headers,
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(
            self.header("docker-distribution-api-version"),
            "registry/2.0"
        );
        self
    }

    /// Asserts a spec error: status, `Content-Type`, and a body of exactly one
    /// error `{"code","message","detail"}` with this code and a message.
    pub fn error(&self, status: u16, code: &str) {
        self.status(status);
        assert_eq!(self.header("content-type"), "application/json");
        let body = String::from_utf8(self.body.clone()).unwrap();
        let prefix = format!(r#"{{"errors":[{{"code":"{code}","message":""#);
        assert!(body.starts_with(&prefix), "{body}");
        assert!(body.contains(r#"","detail":"#), "{body}");
        let v = self.json();
        assert_eq!(v["errors"].as_array().unwrap().len(), 1, "{body}");
        let e = &v["errors"][0];
        assert_eq!(e.as_object().unwrap().len(), 3, "{body}");
        assert!(
            e["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{body}"
        );
    }
}

/// Sends a request with a body to the router in memory.
pub async fn send_body(
    router: &Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Reply {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = router
        .clone()
        .oneshot(req.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    let (parts, body) = res.into_parts();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes().to_vec(),
    }
}

/// Sends a request without a body.
pub async fn send(router: &Router, method: &str, uri: &str, headers: &[(&str, &str)]) -> Reply {
    send_body(router, method, uri, headers, Vec::new()).await
}

/// `GET uri`.
pub async fn get(router: &Router, uri: &str) -> Reply {
    send(router, "GET", uri, &[]).await
}
