//! Every property a job of the release can be given that airlock cannot
//! use fails the deploy with a message naming the property (issue 42 §1):
//! at render, where the template can tell (types, ranges, formats, PEM
//! shapes, pairs that go together), else at `pre-start`, which runs
//! `airlock serve --check-config` on the rendered config and names the
//! property behind each file it refuses (a certificate that does not
//! parse, a keyring without keys). Each case renders every template of the
//! job, as a director does, from a valid deployment with one property
//! changed.

use crate::bosh_release::render_all;
use crate::bosh_vm::Vm;
use crate::common;

use serde_json::{Value, json};

use common::ca::{self, SERVER_EXT, issue, make_ca};
use common::*;

/// `base` with the property at dotted `path` set to `value`.
fn with(base: &Value, path: &str, value: Value) -> Value {
    let mut props = base.clone();
    let mut at = &mut props;
    let keys: Vec<&str> = path.split('.').collect();
    for k in &keys[..keys.len() - 1] {
        if at.get(*k).is_none() {
            at[*k] = json!({});
        }
        at = &mut at[*k];
    }
    at[keys[keys.len() - 1]] = value;
    props
}

/// Renders `job` with `props`; asserts that some template fails and that a
/// failure names `property`.
fn assert_refused(job: &str, props: &Value, links: &Value, property: &str) {
    let errors: Vec<String> = render_all(job, props, links)
        .into_values()
        .filter_map(Result::err)
        .collect();
    assert!(
        errors.iter().any(|e| e.contains(property)),
        "{job} with {props}: no render error names {property}: {errors:?}"
    );
}

fn pem(kind: &str, body: &str) -> String {
    format!("-----BEGIN {kind}-----\n{body}\n-----END {kind}-----\n")
}

#[test]
fn every_invalid_airlock_property_fails_at_render_naming_it() {
    let base =
        json!({"airlock": {"listen_address": "127.0.0.1", "port": 8080, "plain_http": true}});
    assert!(
        render_all("airlock", &base, &json!({}))
            .values()
            .all(Result::is_ok),
        "the base deployment renders"
    );
    let user = |over: Value| {
        let mut u = json!({"name": "ops", "password_hash": "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA", "roles": ["admin"]});
        for (k, v) in over.as_object().unwrap() {
            u[k] = v.clone();
        }
        u
    };
    let cert = pem("CERTIFICATE", "QUJD");
    let key = pem("PRIVATE KEY", "QUJD");
    let s3 = |base: &Value| with(base, "airlock.store.url", json!("s3://blobs/site"));
    let cases: Vec<(Value, &str)> = vec![
        (
            with(&base, "airlock.listen_address", json!("airlock.internal")),
            "airlock.listen_address",
        ),
        (with(&base, "airlock.port", json!(0)), "airlock.port"),
        (with(&base, "airlock.port", json!(70000)), "airlock.port"),
        (with(&base, "airlock.port", json!("https")), "airlock.port"),
        (
            with(&base, "airlock.plain_http", json!("yes")),
            "airlock.plain_http",
        ),
        (
            with(&base, "airlock.store.path", json!("relative/store")),
            "airlock.store.path",
        ),
        (
            with(
                &base,
                "airlock.store.url",
                json!("https://blobs.internal/site"),
            ),
            "airlock.store.url",
        ),
        (
            with(&s3(&base), "airlock.store.s3_endpoint", json!("minio:9000")),
            "airlock.store.s3_endpoint",
        ),
        (
            with(&s3(&base), "airlock.store.s3_region", json!("US East")),
            "airlock.store.s3_region",
        ),
        (
            with(
                &s3(&base),
                "airlock.store.s3_ca",
                json!("not a certificate"),
            ),
            "airlock.store.s3_ca",
        ),
        (
            with(&s3(&base), "airlock.store.s3_single_writer", json!("no")),
            "airlock.store.s3_single_writer",
        ),
        (
            with(
                &s3(&base),
                "airlock.store.s3_timeouts",
                json!({"idle": "soon"}),
            ),
            "airlock.store.s3_timeouts",
        ),
        (
            with(
                &s3(&base),
                "airlock.store.s3_timeouts",
                json!({"read": "5s"}),
            ),
            "airlock.store.s3_timeouts",
        ),
        (
            with(
                &s3(&base),
                "airlock.store.s3_timeouts",
                json!({"connect": "0s"}),
            ),
            "airlock.store.s3_timeouts",
        ),
        (
            with(&base, "airlock.registry.blob_redirect", json!(1)),
            "airlock.registry.blob_redirect",
        ),
        (
            with(
                &with(&base, "airlock.tls.cert", json!("CERT")),
                "airlock.tls.key",
                json!(key),
            ),
            "airlock.tls.cert",
        ),
        (
            with(
                &with(&base, "airlock.tls.cert", json!(cert)),
                "airlock.tls.key",
                json!("KEY"),
            ),
            "airlock.tls.key",
        ),
        (
            with(&base, "airlock.tls.cert", json!(cert)),
            "airlock.tls.key",
        ),
        (with(&base, "airlock.tls.ca", json!("CA")), "airlock.tls.ca"),
        (
            with(&base, "airlock.tls.client_ca", json!("CA")),
            "airlock.tls.client_ca",
        ),
        (
            with(&base, "airlock.tls.client_ca", json!(cert)),
            "airlock.tls.client_ca",
        ),
        (
            with(&base, "airlock.auth.anonymous_read", json!("false")),
            "airlock.auth.anonymous_read",
        ),
        (with(&base, "airlock.users", json!("ops")), "airlock.users"),
        (
            with(
                &base,
                "airlock.users",
                json!([user(json!({"name": "o ps"}))]),
            ),
            "airlock.users[0].name",
        ),
        (
            with(
                &base,
                "airlock.users",
                json!([user(json!({"password_hash": "hunter2"}))]),
            ),
            "airlock.users[0].password_hash",
        ),
        (
            with(
                &base,
                "airlock.users",
                json!([user(json!({"roles": ["root"]}))]),
            ),
            "airlock.users[0].roles",
        ),
        (
            with(&base, "airlock.users", json!([user(json!({"roles": []}))])),
            "airlock.users[0].roles",
        ),
        (
            with(
                &base,
                "airlock.users",
                json!([user(json!({"repositories": "stacks/"}))]),
            ),
            "airlock.users[0].repositories",
        ),
        (
            with(
                &base,
                "airlock.users",
                json!([user(json!({"password": "x"}))]),
            ),
            "airlock.users[0]: unknown key \"password\"",
        ),
        (
            with(
                &base,
                "airlock.users",
                json!([user(json!({})), user(json!({}))]),
            ),
            "airlock.users[1].name",
        ),
        (
            with(
                &base,
                "airlock.users",
                json!([{"name": "ops", "roles": ["admin"]}]),
            ),
            "airlock.users: every user needs password_hash",
        ),
        (
            with(&base, "airlock.registry.allow_push", json!("true")),
            "airlock.registry.allow_push",
        ),
        (
            with(&base, "airlock.registry.allow_delete", json!("x")),
            "airlock.registry.allow_delete",
        ),
        (
            with(
                &base,
                "airlock.registry.mirror_namespace",
                json!("https://docker.io"),
            ),
            "airlock.registry.mirror_namespace",
        ),
        (
            with(&base, "airlock.limits.max_blob_size", json!("lots")),
            "airlock.limits.max_blob_size",
        ),
        (
            with(&base, "airlock.limits.max_blob_size", json!("64 GB")),
            "airlock.limits.max_blob_size",
        ),
        (
            with(&base, "airlock.limits.max_upload_sessions", json!(0)),
            "airlock.limits.max_upload_sessions",
        ),
        (
            with(&base, "airlock.limits.max_connections", json!(-1)),
            "airlock.limits.max_connections",
        ),
        (
            with(&base, "airlock.limits.header_timeout_secs", json!("30s")),
            "airlock.limits.header_timeout_secs",
        ),
        (
            with(&base, "airlock.limits.idle_timeout_secs", json!(2.5)),
            "airlock.limits.idle_timeout_secs",
        ),
        (
            with(&base, "airlock.limits.shutdown_delay_secs", json!(20)),
            "airlock.limits.shutdown_delay_secs",
        ),
        (
            with(&base, "airlock.stacks.allow_admin", json!("on")),
            "airlock.stacks.allow_admin",
        ),
        (
            with(&base, "airlock.import.keyring", json!("my key")),
            "airlock.import.keyring",
        ),
        (
            with(&base, "airlock.import.max_staleness", json!("two weeks")),
            "airlock.import.max_staleness",
        ),
        (
            with(
                &base,
                "airlock.import.policy",
                json!({"repositories": ["a/*"]}),
            ),
            "airlock.import.policy",
        ),
        (
            with(
                &base,
                "airlock.import.policy",
                json!([{"keys": [pem("PUBLIC KEY", "x")]}]),
            ),
            "airlock.import.policy[0].repositories",
        ),
        (
            with(
                &base,
                "airlock.import.policy",
                json!([{"repositories": ["a/*"], "keys": ["key"]}]),
            ),
            "airlock.import.policy[0].keys",
        ),
        (
            with(
                &base,
                "airlock.import.policy",
                json!([{"repositories": ["a/*"]}]),
            ),
            "airlock.import.policy[0] must be a rule with keys or identities",
        ),
        (
            with(
                &base,
                "airlock.import.policy",
                json!([{"repositories": ["a/*"], "key": "x"}]),
            ),
            "airlock.import.policy[0]",
        ),
        (
            with(
                &base,
                "airlock.import.policy",
                json!([{"repositories": ["a/*"],
                "identities": [{"subject": "s", "issuer": "i"}]}]),
            ),
            "airlock.import.policy[0].trusted_root",
        ),
        (
            with(
                &base,
                "airlock.import.policy",
                json!([{"repositories": ["a/*"],
                "identities": [{"subject": "s", "issuer": "i"}], "trusted_root": "{not json"}]),
            ),
            "airlock.import.policy[0].trusted_root",
        ),
        (
            with(
                &base,
                "airlock.import.policy",
                json!([{"repositories": ["a/*"],
                "identities": [{"email": "s"}], "trusted_root": "{}"}]),
            ),
            "airlock.import.policy[0].identities",
        ),
        (
            with(
                &base,
                "airlock.import.policy",
                json!([{"repositories": ["a/*"],
                "keys": [pem("PUBLIC KEY", "x")], "each_platform": "yes"}]),
            ),
            "airlock.import.policy[0].each_platform",
        ),
        (
            with(&base, "airlock.torcx.keys", json!(["stable"])),
            "airlock.torcx.keys",
        ),
        (
            with(
                &base,
                "airlock.torcx.keys",
                json!({"st able": pem("PGP PRIVATE KEY BLOCK", "x")}),
            ),
            "airlock.torcx.keys: bad remote name",
        ),
        (
            with(&base, "airlock.torcx.keys", json!({"stable": "key"})),
            "airlock.torcx.keys.stable",
        ),
        (
            with(&base, "airlock.gc.keep_generations", json!(0)),
            "airlock.gc.keep_generations",
        ),
        (
            with(&base, "airlock.gc.keep_days", json!("week")),
            "airlock.gc.keep_days",
        ),
        (
            with(&base, "airlock.gc.interval", json!("daily")),
            "airlock.gc.interval",
        ),
        (
            with(&base, "airlock.gc.grace", json!("1 hour")),
            "airlock.gc.grace",
        ),
        (
            with(&base, "airlock.log_level", json!("info; rm -rf /")),
            "airlock.log_level",
        ),
        (
            with(&base, "airlock.bpm.memory_limit", json!("2 GB")),
            "airlock.bpm.memory_limit",
        ),
        (
            with(&base, "airlock.bpm.open_files", json!(10)),
            "airlock.bpm.open_files",
        ),
        (
            with(&base, "airlock.drain.timeout_secs", json!(0)),
            "airlock.drain.timeout_secs",
        ),
        (
            with(&base, "airlock.post_start.timeout_secs", json!("two")),
            "airlock.post_start.timeout_secs",
        ),
        (
            with(&base, "airlock.backup.lock_timeout", json!("0")),
            "airlock.backup.lock_timeout",
        ),
        (
            with(&base, "airlock.backup.lock_timeout", json!("ten minutes")),
            "airlock.backup.lock_timeout",
        ),
        (
            with(
                &with(&base, "airlock.listen_address", json!("0.0.0.0")),
                "airlock.plain_http",
                json!(false),
            ),
            "airlock.plain_http must be true",
        ),
    ];
    // Every property the spec declares is among the cases (a new property
    // gets its invalid value here).
    let spec = crate::bosh_release::job_spec("airlock");
    let covered: Vec<&str> = cases.iter().map(|(_, p)| *p).collect();
    for name in spec["properties"].as_object().unwrap().keys() {
        let checked_elsewhere = [
            "airlock.store.s3_access_key_id",
            "airlock.store.s3_secret_access_key",
        ];
        assert!(
            checked_elsewhere.contains(&name.as_str())
                || covered.iter().any(|c| c.starts_with(name.as_str())),
            "no invalid-value case for {name}"
        );
    }
    for (props, property) in &cases {
        assert_refused("airlock", props, &json!({}), property);
    }
    // A secret's value is never echoed by the refusal.
    let secret = with(
        &with(&base, "airlock.tls.cert", json!(cert)),
        "airlock.tls.key",
        json!("s3cr3t-key-material"),
    );
    assert_not_echoed("airlock", &secret, "airlock.tls.key", "s3cr3t");
}

/// Renders `job` with `props`: a failure names `property`, none shows
/// `secret`.
fn assert_not_echoed(job: &str, props: &Value, property: &str, secret: &str) {
    assert_refused(job, props, &json!({}), property);
    for e in render_all(job, props, &json!({}))
        .into_values()
        .filter_map(Result::err)
    {
        assert!(!e.contains(secret), "{job}: a refusal echoes a secret: {e}");
    }
}

#[test]
fn every_invalid_airlock_rootfs_property_fails_at_render_naming_it() {
    let base =
        json!({"airlock_rootfs": {"stacks": ["cflinuxfs4"], "url": "https://airlock.internal"}});
    assert!(
        render_all("airlock-rootfs", &base, &json!({}))
            .values()
            .all(Result::is_ok),
        "the base deployment renders"
    );
    let cert = pem("CERTIFICATE", "QUJD");
    let cases: Vec<(Value, &str)> = vec![
        (
            with(&base, "airlock_rootfs.stacks", json!("cflinuxfs4")),
            "airlock_rootfs.stacks",
        ),
        (
            with(&base, "airlock_rootfs.stacks", json!(["cf linuxfs4"])),
            "airlock_rootfs.stacks",
        ),
        (
            with(&base, "airlock_rootfs.stacks", json!([])),
            "airlock_rootfs.stacks is empty",
        ),
        (
            with(&base, "airlock_rootfs.install_dir", json!("/tmp/rootfs")),
            "airlock_rootfs.install_dir",
        ),
        (
            with(&base, "airlock_rootfs.interval_secs", json!(0)),
            "airlock_rootfs.interval_secs",
        ),
        (
            with(&base, "airlock_rootfs.interval_secs", json!("1m")),
            "airlock_rootfs.interval_secs",
        ),
        (
            with(&base, "airlock_rootfs.cell_id", json!("cell 7")),
            "airlock_rootfs.cell_id",
        ),
        (
            with(&base, "airlock_rootfs.pre_start_timeout_secs", json!("30m")),
            "airlock_rootfs.pre_start_timeout_secs",
        ),
        (
            with(&base, "airlock_rootfs.trusted_certs", json!(["my CA"])),
            "airlock_rootfs.trusted_certs",
        ),
        (
            with(&base, "airlock_rootfs.url", json!("ftp://airlock.internal")),
            "airlock_rootfs.url",
        ),
        (
            with(&base, "airlock_rootfs.ca", json!("CA")),
            "airlock_rootfs.ca",
        ),
        (
            with(&base, "airlock_rootfs.username", json!("cell")),
            "airlock_rootfs.username and airlock_rootfs.password",
        ),
        (
            with(&base, "airlock_rootfs.password", json!("pw")),
            "airlock_rootfs.username and airlock_rootfs.password",
        ),
        (
            with(
                &with(&base, "airlock_rootfs.tls.cert", json!("C")),
                "airlock_rootfs.tls.key",
                json!(pem("PRIVATE KEY", "K")),
            ),
            "airlock_rootfs.tls.cert",
        ),
        (
            with(
                &with(&base, "airlock_rootfs.tls.cert", json!(cert)),
                "airlock_rootfs.tls.key",
                json!("K"),
            ),
            "airlock_rootfs.tls.key",
        ),
        (
            with(&base, "airlock_rootfs.tls.cert", json!(cert)),
            "airlock_rootfs.tls.cert and airlock_rootfs.tls.key",
        ),
        (
            with(&base, "airlock_rootfs.log_level", json!("debug info")),
            "airlock_rootfs.log_level",
        ),
    ];
    let spec = crate::bosh_release::job_spec("airlock-rootfs");
    let covered: Vec<&str> = cases.iter().map(|(_, p)| *p).collect();
    for name in spec["properties"].as_object().unwrap().keys() {
        assert!(
            covered.iter().any(|c| c.contains(name.as_str())),
            "no invalid-value case for {name}"
        );
    }
    for (props, property) in &cases {
        assert_refused("airlock-rootfs", props, &json!({}), property);
    }
    let secret = with(
        &with(&base, "airlock_rootfs.tls.cert", json!(cert)),
        "airlock_rootfs.tls.key",
        json!("s3cr3t-key-material"),
    );
    assert_not_echoed(
        "airlock-rootfs",
        &secret,
        "airlock_rootfs.tls.key",
        "s3cr3t",
    );
}

#[test]
fn pre_start_refuses_what_only_airlock_can_judge_naming_the_property() {
    let tmp = tempfile::tempdir().unwrap();
    make_ca(tmp.path(), "ca");
    issue(tmp.path(), "ca", "server", "localhost", SERVER_EXT);
    let read = |f: &str| std::fs::read_to_string(tmp.path().join(f)).unwrap();
    let base = crate::bosh_vm::fs_props(&tmp.path().join("store"), free_port());
    let good_tls = with(
        &with(&base, "airlock.tls.cert", json!(read("server.crt"))),
        "airlock.tls.key",
        json!(read("server.key")),
    );
    // Valid: pre-start passes (airlock accepts the rendered config).
    Vm::new(&good_tls).run_ok("pre-start", &[]);
    let (_, public) = test_key();
    Vm::new(&with(
        &base,
        "airlock.import.keyring",
        json!(std::fs::read_to_string(&public).unwrap()),
    ))
    .run_ok("pre-start", &[]);
    // A site policy: pre-start writes the key where the config names it,
    // and airlock loads it.
    ca::ec_key(tmp.path(), "cosign.key");
    ca::openssl(
        tmp.path(),
        &["ec", "-in", "cosign.key", "-pubout", "-out", "cosign.pub"],
    );
    let policy = |rule: Value| with(&base, "airlock.import.policy", json!([rule]));
    let good = policy(
        json!({"repositories": ["stacks/**"], "keys": [read("cosign.pub")],
                             "each_platform": true}),
    );
    let vm = Vm::new(&with(&good, "airlock.import.max_staleness", json!("14d")));
    vm.run_ok("pre-start", &[]);
    let config = std::fs::read_to_string(vm.job_dir().join("config/airlock.toml")).unwrap();
    let written = vm.path().join("data/airlock/policy/0-key-0.pub");
    assert_eq!(
        std::fs::read_to_string(&written).unwrap(),
        read("cosign.pub")
    );
    assert!(
        config.contains("max_staleness = \"14d\"")
            && config.contains(&format!("keys = [\"{}\"]", written.display()))
            && config.contains("repositories = [\"stacks/**\"]")
            && config.contains("each_platform = true"),
        "{config}"
    );
    // Keyless: the identities and the trusted root as airlock reads them.
    let sig = crate::upstream_keyless::Sigstore::new(tmp.path());
    let vm = Vm::new(&policy(json!({"repositories": ["stacks/**"],
        "identities": [{"subject_regex": "^https://github.com/example/", "issuer": "https://accounts.example.org"}],
        "trusted_root": std::fs::read_to_string(&sig.root).unwrap()})));
    vm.run_ok("pre-start", &[]);
    let config = std::fs::read_to_string(vm.job_dir().join("config/airlock.toml")).unwrap();
    assert!(
        config.contains(r#"identities = [{ issuer = "https://accounts.example.org", subject_regex = "^https://github.com/example/" }]"#),
        "{config}"
    );
    assert_eq!(
        std::fs::read(vm.path().join("data/airlock/policy/0-trusted_root.json")).unwrap(),
        std::fs::read(&sig.root).unwrap()
    );
    let cases = [
        // A PEM-shaped key that is not one; a trusted root that is JSON
        // but not a trusted root.
        (
            policy(json!({"repositories": ["stacks/**"], "keys": [pem("PUBLIC KEY", "QUJD")]})),
            "airlock.import.policy[0].keys[0]",
        ),
        (
            policy(
                json!({"repositories": ["stacks/**"], "trusted_root": "{\"tlogs\": 3}",
                          "identities": [{"subject": "s", "issuer": "i"}]}),
            ),
            "airlock.import.policy[0].trusted_root",
        ),
        // PEM-shaped, not a certificate.
        (
            with(
                &good_tls,
                "airlock.tls.cert",
                json!(pem("CERTIFICATE", "QUJD")),
            ),
            "airlock.tls.cert",
        ),
        // A key that is not the certificate's.
        (
            with(&good_tls, "airlock.tls.key", json!(read("ca.key"))),
            "airlock.tls.key",
        ),
        (
            with(
                &good_tls,
                "airlock.tls.client_ca",
                json!(pem("CERTIFICATE", "QUJD")),
            ),
            "airlock.tls.client_ca",
        ),
        (
            with(
                &base,
                "airlock.import.keyring",
                json!(pem("PGP PUBLIC KEY BLOCK", "QUJD")),
            ),
            "airlock.import.keyring",
        ),
        (
            with(
                &base,
                "airlock.torcx.keys",
                json!({"stable": pem("PGP PRIVATE KEY BLOCK", "QUJD")}),
            ),
            "airlock.torcx.keys.stable",
        ),
    ];
    for (props, property) in cases {
        let vm = Vm::new(&props);
        let o = vm.run("pre-start", &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "pre-start accepted {property}");
        assert!(
            err.contains("the job's properties make a config airlock refuses")
                && err.contains(property),
            "pre-start should name {property}: {err}"
        );
    }
}
