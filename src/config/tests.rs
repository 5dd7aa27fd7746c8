use std::path::Path;

use super::*;

#[test]
fn flags_override_the_file_and_tables_merge() {
    let file = parse(
        "listen = \"127.0.0.1:5000\"\n[registry]\nallow_push = true\nmirror_namespace = \"docker.io\"\n[limits]\nmax_page = 10\n",
        "t",
    )
    .unwrap();
    let mut flags = Settings::default();
    flags.registry.allow_push = Some(false);
    flags.limits.max_connections = std::num::NonZeroU64::new(7);
    flags.listen = vec![
        "127.0.0.1:6000".parse().unwrap(),
        "[::1]:6000".parse().unwrap(),
    ];
    let s = merge(file, &flags).unwrap();
    assert_eq!(s.registry.allow_push, Some(false));
    assert_eq!(s.registry.mirror_namespace.as_deref(), Some("docker.io"));
    assert_eq!(s.limits.max_page.map(|n| n.get()), Some(10));
    assert_eq!(s.limits.max_connections.map(|n| n.get()), Some(7));
    assert_eq!(s.listen.len(), 2);
}

#[test]
fn relative_paths_follow_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("airlock.toml");
    std::fs::write(
        &path,
        "[tls]\ncert = \"a.crt\"\nkey = \"/abs/a.key\"\n[torcx]\nkeys = { stable = \"k.asc\" }\n",
    )
    .unwrap();
    let s = load(&path).unwrap();
    assert_eq!(s.tls.cert.unwrap(), dir.path().join("a.crt"));
    assert_eq!(s.tls.key.unwrap(), Path::new("/abs/a.key"));
    assert_eq!(s.torcx.keys["stable"], dir.path().join("k.asc"));
}

#[test]
fn errors_name_the_key_path() {
    let e = parse(
        "[[user]]\nname = \"a\"\nroles = [\"admin\"]\npasword_hash = \"x\"\n",
        "f.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("config f.toml: user[0].pasword_hash: unknown field"),
        "{e}"
    );
    let e = parse("[limits]\nmax_blob_size = \"12Q\"\n", "f")
        .unwrap_err()
        .to_string();
    assert!(e.contains("limits.max_blob_size"), "{e}");
    let e = Settings {
        listen: vec!["10.0.0.1:80".parse().unwrap()],
        ..Settings::default()
    }
    .resolve()
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.starts_with("listen: 10.0.0.1:80 is not a loopback address"),
        "{e}"
    );
}

#[test]
fn defaults_match_the_flags_of_old() {
    let r = Settings::default().resolve().unwrap();
    assert_eq!(r.listen, vec!["127.0.0.1:5000".parse().unwrap()]);
    assert_eq!(
        r.store.url,
        crate::store::StoreUrl::File("./airlock-data".into())
    );
    assert!(!r.registry.allow_push && !r.registry.allow_delete);
    assert_eq!(r.registry.uploads.max_blob_size, 64 << 30);
    assert_eq!(r.registry.max_page, 1000);
    assert_eq!(r.limits.max_connections, 4096);
    assert!(r.tls.is_none() && r.policy.is_open());
}

#[test]
fn console_section() {
    let off = parse("", "t").unwrap().resolve().unwrap();
    assert!(off.ui.is_none(), "off by default");
    let on = parse(
        "[store]\npath = \"/srv/d\"\n[ui]\nenabled = true\nsample_interval = \"30s\"\n",
        "t",
    )
    .unwrap()
    .resolve()
    .unwrap()
    .ui
    .unwrap();
    assert_eq!(on.sample_interval, std::time::Duration::from_secs(30));
    assert_eq!(
        on.session_lifetime,
        std::time::Duration::from_secs(8 * 3600)
    );
    assert!(!on.tls);
    assert_eq!(
        (on.store.backend.as_str(), on.store.location.as_str()),
        ("filesystem", "/srv/d")
    );
    for (bad, key) in [
        ("sample_interval = \"0s\"", "ui.sample_interval"),
        ("session_lifetime = \"30s\"", "ui.session_lifetime"),
        ("sample_interval = \"soon\"", "ui.sample_interval"),
    ] {
        let e = parse(&format!("[ui]\nenabled = true\n{bad}\n"), "t")
            .unwrap()
            .resolve()
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with(key), "{bad}: {e}");
    }
}

#[test]
fn s3_timeouts_default_parse_and_bound_each_other() {
    use crate::store::s3::S3Timeouts;
    use std::time::Duration;
    let timeouts = |toml: &str| {
        let s = parse(&format!("[store]\nurl = \"s3://b/p\"\n{toml}"), "t").unwrap();
        s.store.target().map(|t| t.s3.timeouts)
    };
    assert_eq!(timeouts("").unwrap(), S3Timeouts::default());
    let t = timeouts("s3_idle_timeout = \"1m\"\ns3_connect_timeout = \"2s\"").unwrap();
    assert_eq!(
        (t.idle, t.connect),
        (Duration::from_secs(60), Duration::from_secs(2))
    );
    // An operation deadline below the default first-byte one bounds it.
    let t = timeouts("s3_operation_timeout = \"3s\"").unwrap();
    assert_eq!(
        (t.operation, t.first_byte),
        (Duration::from_secs(3), Duration::from_secs(3))
    );
    let e = timeouts("s3_operation_timeout = \"3s\"\ns3_first_byte_timeout = \"5s\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("store.s3_operation_timeout"), "{e}");
    let e = timeouts("s3_idle_timeout = \"0s\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("store.s3_idle_timeout: at least 1s"), "{e}");
    // A 16 MiB part adds 16 s to its deadlines.
    assert_eq!(S3Timeouts::for_body(16 << 20), Duration::from_secs(16));
    assert_eq!(S3Timeouts::for_body(1), Duration::from_secs(1));
    assert_eq!(S3Timeouts::for_body(0), Duration::ZERO);
}
