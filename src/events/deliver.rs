//! The delivery loop: every [`DeliverySettings::poll`] it reads the queue
//! (`events/queue/`, oldest first) and POSTs each due event to each webhook
//! that wants it, signed ([`super::webhook::signature`]).
//!
//! A 2xx answer delivers; anything else (a connection error, a timeout, a
//! non-2xx status) is retried after `retry_base · 2^(attempts-1)` (capped at
//! `retry_max`), up to `max_attempts`, then the delivery is `failed`. The
//! attempts are written back to the queue entry, so a restart resumes them;
//! once every webhook is done the entry moves to `events/log/`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

use super::webhook::{WebhookConfig, signature};
use super::{Delivery, QUEUE, finish, get, put};
use crate::store::Blobstore;

/// Timing of deliveries.
#[derive(Debug, Clone)]
pub struct DeliverySettings {
    /// How often the queue is read (default 1 s).
    pub poll: Duration,
    /// Wait before the first retry; doubles per attempt (default 1 s).
    pub retry_base: Duration,
    /// Longest wait between retries (default 5 min).
    pub retry_max: Duration,
    /// POSTs per event and webhook before giving up (default 10).
    pub max_attempts: u32,
    /// Per-request timeout (default 10 s).
    pub timeout: Duration,
}

impl Default for DeliverySettings {
    fn default() -> DeliverySettings {
        DeliverySettings {
            poll: Duration::from_secs(1),
            retry_base: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
            max_attempts: 10,
            timeout: Duration::from_secs(10),
        }
    }
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

struct Hook {
    config: WebhookConfig,
    client: HttpClient,
}

/// Delivers queued events to the configured webhooks.
pub struct Deliverer {
    store: Arc<dyn Blobstore>,
    hooks: Vec<Hook>,
    settings: DeliverySettings,
}

fn client(config: &WebhookConfig) -> Result<HttpClient, String> {
    let tls = crate::http_client::tls_config(&crate::http_client::TlsOptions {
        ca_file: config.ca_file.clone(),
        ..Default::default()
    })
    .map_err(|e| format!("webhook {}: {e:#}", config.url))?;
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(hyper_util::rt::TokioExecutor::new()).build(https))
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// An error and its causes, `: `-joined.
fn chain(e: &dyn std::error::Error) -> String {
    match crate::http_client::source_chain(e) {
        below if below.is_empty() => e.to_string(),
        below => format!("{e}: {below}"),
    }
}

fn done(d: &Delivery) -> bool {
    matches!(d.status.as_str(), "delivered" | "failed" | "dropped")
}

impl Deliverer {
    /// A deliverer for `hooks` over `store`. Errors: a webhook's CA file.
    pub fn new(
        store: Arc<dyn Blobstore>,
        hooks: Vec<WebhookConfig>,
        settings: DeliverySettings,
    ) -> Result<Deliverer, String> {
        let hooks = hooks
            .into_iter()
            .map(|config| {
                Ok(Hook {
                    client: client(&config)?,
                    config,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Deliverer {
            store,
            hooks,
            settings,
        })
    }

    /// Runs the loop until the task is dropped.
    pub async fn run(self) {
        loop {
            if let Err(e) = self.pass().await {
                tracing::warn!(error = %e, "event delivery pass failed");
            }
            tokio::time::sleep(self.settings.poll).await;
        }
    }

    /// One pass over the queue: every due delivery is attempted once.
    pub async fn pass(&self) -> crate::store::Result<()> {
        for key in self.store.list(QUEUE).await? {
            let mut q = match get(&*self.store, &key).await {
                Ok(q) => q,
                Err(crate::store::StoreError::NotFound(_)) => continue,
                Err(e) => {
                    tracing::warn!(key, error = %e, "unreadable queued event; moved to the log");
                    self.store.delete(&key).await?;
                    continue;
                }
            };
            let mut changed = false;
            for hook in self.hooks.iter().filter(|h| h.config.wants(&q.event.kind)) {
                let d = q.deliveries.entry(hook.config.url.clone()).or_default();
                if done(d) || d.next_at.is_some_and(|t| t > now_unix()) {
                    continue;
                }
                self.attempt(hook, &q.event, d).await;
                changed = true;
            }
            let wanted: Vec<&str> = self
                .hooks
                .iter()
                .filter(|h| h.config.wants(&q.event.kind))
                .map(|h| h.config.url.as_str())
                .collect();
            if wanted
                .iter()
                .all(|u| q.deliveries.get(*u).is_some_and(done))
            {
                finish(&*self.store, &key, &q).await?;
            } else if changed {
                put(&*self.store, &key, &q).await?;
            }
        }
        Ok(())
    }

    async fn attempt(&self, hook: &Hook, event: &super::Event, d: &mut Delivery) {
        let body = serde_json::to_vec(event).unwrap_or_default();
        let mut req = hyper::Request::post(&hook.config.url)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::USER_AGENT, "airlock-webhook")
            .header("X-Airlock-Event", &event.kind)
            .header("X-Airlock-Delivery", &event.id);
        if let Some(secret) = &hook.config.secret {
            req = req.header("X-Airlock-Signature", signature(secret, &body));
        }
        d.attempts += 1;
        d.time = Some(crate::state::now_rfc3339());
        let outcome = match req.body(Full::new(Bytes::from(body))) {
            Err(e) => Err(e.to_string()),
            Ok(req) => {
                match tokio::time::timeout(self.settings.timeout, hook.client.request(req)).await {
                    Err(_) => Err(format!("no answer within {:?}", self.settings.timeout)),
                    Ok(Err(e)) => Err(chain(&e)),
                    Ok(Ok(res)) => {
                        d.http_status = Some(res.status().as_u16());
                        if res.status().is_success() {
                            Ok(())
                        } else {
                            Err(format!("answered {}", res.status()))
                        }
                    }
                }
            }
        };
        match outcome {
            Ok(()) => {
                d.status = "delivered".into();
                d.error = None;
                d.next_at = None;
                tracing::info!(url = %hook.config.url, event = %event.id, kind = %event.kind, "event delivered");
            }
            Err(e) => {
                let give_up = d.attempts >= self.settings.max_attempts;
                d.status = if give_up { "failed" } else { "pending" }.into();
                let wait = self
                    .settings
                    .retry_base
                    .saturating_mul(1 << (d.attempts - 1).min(20))
                    .min(self.settings.retry_max);
                d.next_at = (!give_up).then(|| now_unix() + wait.as_secs().max(1));
                tracing::warn!(url = %hook.config.url, event = %event.id, attempts = d.attempts, error = %e, give_up, "event delivery failed");
                d.error = Some(e);
            }
        }
    }
}
