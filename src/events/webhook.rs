//! Webhook settings (`[[webhook]]` in the serve config) and the request
//! signature.
//!
//! Each delivery is `POST <url>` with the event's JSON as the body and
//! headers `Content-Type: application/json`, `X-Airlock-Event: <type>`,
//! `X-Airlock-Delivery: <event id>` and, when the webhook has a secret,
//! `X-Airlock-Signature: sha256=<hex HMAC-SHA256(secret, body)>` (RFC 2104,
//! the scheme GitHub and Gitea webhooks use): a receiver recomputes the
//! HMAC over the raw body and compares in constant time.

use std::path::PathBuf;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// One `[[webhook]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Where to POST (`http://` or `https://`).
    pub url: String,
    /// The event types to send (`stack.promoted`, `stack.rolled_back`,
    /// `stack.state_changed`, `import.completed`); empty or absent: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
    /// The HMAC key; absent: no `X-Airlock-Signature` header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// PEM CA bundle for an `https://` receiver with a private CA (added to
    /// the system roots); relative to the config file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

impl WebhookConfig {
    /// True when this webhook wants events of type `kind`.
    pub fn wants(&self, kind: &str) -> bool {
        self.events.is_empty() || self.events.iter().any(|e| e == kind)
    }

    /// Checks the URL and event names. Errors: one line naming the bad value.
    pub fn check(&self) -> Result<(), String> {
        let uri: hyper::Uri = self
            .url
            .parse()
            .map_err(|e| format!("webhook url {:?}: {e}", self.url))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(format!(
                "webhook url {:?}: must be http:// or https:// with a host",
                self.url
            ));
        }
        if let Some(bad) = self
            .events
            .iter()
            .find(|e| !super::KINDS.contains(&e.as_str()))
        {
            return Err(format!(
                "webhook {}: unknown event {bad:?} (known: {})",
                self.url,
                super::KINDS.join(", ")
            ));
        }
        Ok(())
    }
}

/// `sha256=<hex>`: the HMAC-SHA256 of `body` under `secret`.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4231_case_2() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn check_refuses_bad_entries() {
        let mut w = WebhookConfig {
            url: "ftp://x/".into(),
            events: vec![],
            secret: None,
            ca_file: None,
        };
        assert!(w.check().is_err());
        w.url = "http://127.0.0.1:9/hook".into();
        w.events = vec!["stack.promoted".into(), "nope".into()];
        assert!(w.check().unwrap_err().contains("nope"));
        w.events = vec!["stack.promoted".into()];
        assert!(w.check().is_ok());
        assert!(w.wants("stack.promoted") && !w.wants("import.completed"));
    }
}
