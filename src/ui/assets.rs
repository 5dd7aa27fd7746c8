//! The console's assets, compiled into the binary (nothing is loaded from
//! another origin: the console works in the air gap): its stylesheet and
//! icon. There is no script: charts are SVG drawn on the server.

use axum::Extension;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::http::UiError;
use crate::server::routes::AssetName;

/// The stylesheet (`/ui/assets/console.css`).
pub const CSS: &str = include_str!("assets/console.css");

/// The icon (`/ui/assets/favicon.svg`).
pub const FAVICON: &str = include_str!("assets/favicon.svg");

/// `(name, content type, bytes)` of every asset.
pub const ALL: [(&str, &str, &str); 2] = [
    ("console.css", "text/css; charset=utf-8", CSS),
    ("favicon.svg", "image/svg+xml", FAVICON),
];

/// `GET /ui/assets/NAME`: the asset, cacheable for an hour (the name as the
/// access layer parsed it).
pub async fn serve(Extension(AssetName(file)): Extension<AssetName>) -> Response {
    let Some((_, ct, body)) = ALL.iter().find(|(n, _, _)| *n == file) else {
        return UiError::not_found(format!("no asset {file:?}")).into_response();
    };
    let mut res = (*body).into_response();
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    res
}
