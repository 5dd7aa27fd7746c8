//! `/metrics` (issue 13): after an import, a pull and a push, the exposition
//! parses with a real OpenMetrics parser (Python `prometheus_client`) and
//! holds the counts that happened; `/healthz` and `/readyz` answer. On the
//! filesystem only (see `on_backends!` below).

mod common;

use std::sync::Arc;

use common::backend::{Backend, on_backends};
use common::router::{get, send_body};
use common::{http, openmetrics as parse, synth, test_key};

// One backend per test process: airlock's metrics registry is process-wide
// and the counts checked here are exact, so scenarios on several backends
// in one test binary (run in parallel) would add to each other's counts.
// The metrics do not depend on the backend; the S3 paths they count are
// run by registry_pull, registry_push and s3_backends.
on_backends!([fs] metrics_count_imports_pulls_and_pushes);

fn value(samples: &[(String, serde_json::Value, f64)], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l[*k] == *v))
        .map(|(_, _, v)| v)
        .sum()
}

fn metrics_count_imports_pulls_and_pushes(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (bundle, _) = synth::bundle(dir.path(), "m", 1, 31);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let state = airlock::state::StateStore::new(rt.block_on(b.open_store()));
    rt.block_on(async {
        let (_, keyring) = test_key();
        let keyring = airlock::bundle::trust::Verifier::keyring(
            airlock::bundle::sign::Keyring::load(&keyring).unwrap(),
        );
        let report = airlock::bundle::import::import(
            &state,
            keyring,
            Box::new(std::fs::File::open(&bundle).unwrap()),
            "test",
            indicatif::ProgressBar::hidden(),
            &Default::default(),
        )
        .await
        .unwrap();
        let config = airlock::registry::RegistryConfig {
            allow_push: true,
            ..Default::default()
        };
        let app = airlock::server::App::with_config(state.clone(), config);
        let router = airlock::server::router(Arc::new(app));
        // A pull: manifest and its config blob.
        let m = get(&router, "/v2/m/img-00/manifests/latest").await;
        m.status(200);
        let manifest = m.json();
        let config_digest = manifest["config"]["digest"].as_str().unwrap().to_string();
        let blob = get(&router, &format!("/v2/m/img-00/blobs/{config_digest}")).await;
        blob.status(200);
        let served = (m.body.len() + blob.body.len()) as f64;
        // A push: one blob (monolithic) and a manifest naming it.
        let body = b"pushed config".to_vec();
        let d = format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&body)));
        send_body(&router, "POST", &format!("/v2/pushed/blobs/uploads/?digest={d}"), &[], body.clone())
            .await
            .status(201);
        let pushed = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": d, "size": body.len()},
            "layers": []
        });
        send_body(
            &router,
            "PUT",
            "/v2/pushed/manifests/v1",
            &[("content-type", "application/vnd.oci.image.manifest.v1+json")],
            serde_json::to_vec(&pushed).unwrap(),
        )
        .await
        .status(201);
        get(&router, "/v2/m/img-00/manifests/nope").await.status(404);
        let r = get(&router, "/metrics").await;
        assert_eq!(r.status.as_u16(), 200);
        let ct = r.headers.get("content-type").unwrap().to_str().unwrap();
        assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
        let text = String::from_utf8(r.body.clone()).unwrap();
        let s = parse(&text);
        let req = "airlock_http_requests_total";
        assert_eq!(value(&s, req, &[("route", "manifest"), ("method", "GET"), ("status", "200")]), 1.0, "{text}");
        assert_eq!(value(&s, req, &[("route", "manifest"), ("status", "404")]), 1.0);
        assert_eq!(value(&s, req, &[("route", "blob"), ("status", "200")]), 1.0);
        assert_eq!(value(&s, req, &[("route", "upload"), ("method", "POST"), ("status", "201")]), 1.0);
        assert_eq!(value(&s, req, &[("route", "manifest"), ("method", "PUT"), ("status", "201")]), 1.0);
        assert_eq!(value(&s, "airlock_http_response_bytes_total", &[]), served);
        assert_eq!(value(&s, "airlock_http_request_duration_seconds_count", &[("route", "manifest")]), 3.0);
        assert_eq!(value(&s, "airlock_imports_total", &[("outcome", "ok")]), 1.0);
        assert_eq!(value(&s, "airlock_import_bytes_total", &[]), report.bytes_new as f64);
        assert_eq!(value(&s, "airlock_state_generation", &[]), 2.0, "import + push");
    });

    // A served process: probes and the open-connection gauge (the scrape's own).
    let server = b.serve(&[]);
    for probe in ["/healthz", "/readyz"] {
        let (status, _, body) = http(&server.addr, "GET", probe, &[]).unwrap();
        assert_eq!((status, body.as_slice()), (200, &b"ok"[..]), "{probe}");
    }
    let (status, _, body) = http(&server.addr, "GET", "/metrics", &[]).unwrap();
    assert_eq!(status, 200);
    let s = parse(&String::from_utf8(body).unwrap());
    // The scrape's own connection, and perhaps a probe's still closing.
    let open = value(&s, "airlock_http_open_connections", &[]);
    assert!((1.0..=3.0).contains(&open), "open connections {open}");
    assert_eq!(
        value(&s, "airlock_http_requests_total", &[("route", "probe")]),
        2.0
    );
    assert_eq!(value(&s, "airlock_state_generation", &[]), 2.0);
}
