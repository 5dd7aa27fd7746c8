//! The BOSH release tree (bosh-release/): every job and package spec parses
//! (Ruby's YAML, as the bosh CLI's Ruby-era tooling reads them) and names
//! only files that exist; every ERB template renders through
//! tests/fixtures/bosh-render.rb (BOSH's `p`, `if_p`, `link`, `if_link`,
//! `spec`) with the default properties and with an S3 + TLS property set;
//! the rendered `airlock.toml` holds only the serve config contract's keys,
//! `bpm.yml` is valid YAML with the limits and disks asked for, every
//! rendered script passes `bash -n`, and the drain script returns 0.
//! The `bosh` CLI itself cannot be installed from the package registries
//! this project reaches, so `bosh create-release` is not run (see
//! bosh-release/README.md).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use common::ca::{SERVER_EXT, issue, make_ca};
use common::*;

pub(crate) fn release() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bosh-release")
}

fn ruby(args: &[&str]) -> String {
    require_tool("ruby", "ruby");
    let o = Command::new("ruby").args(args).output().expect("run ruby");
    assert!(
        o.status.success(),
        "ruby {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// A YAML file as JSON, read by Ruby's YAML (Psych).
pub(crate) fn yaml_file(path: &Path) -> Value {
    let out = ruby(&[
        "-ryaml",
        "-rjson",
        "-e",
        "puts JSON.generate(YAML.safe_load(File.read(ARGV[0]), aliases: false))",
        path.to_str().unwrap(),
    ]);
    serde_json::from_str(&out).unwrap()
}

/// YAML text as JSON.
fn yaml_text(text: &str, dir: &Path) -> Value {
    let f = dir.join("doc.yml");
    std::fs::write(&f, text).unwrap();
    yaml_file(&f)
}

/// Renders `jobs/JOB/templates/TEMPLATE` with `props` and `links`.
pub(crate) fn render(job: &str, template: &str, props: &Value, links: &Value) -> String {
    try_render(job, template, props, links).unwrap_or_else(|e| panic!("{job}/{template}: {e}"))
}

/// Every template of `job` rendered as a director renders them (each on
/// its own; every failure kept): destination path -> text or error.
pub(crate) fn render_all(
    job: &str,
    props: &Value,
    links: &Value,
) -> BTreeMap<String, Result<String, String>> {
    let text = try_render(job, "--all", props, links).unwrap_or_else(|e| panic!("{job}: {e}"));
    let out: BTreeMap<String, Value> = serde_json::from_str(&text).unwrap();
    out.into_iter()
        .map(|(dst, r)| {
            let r = match (r["text"].as_str(), r["error"].as_str()) {
                (Some(t), _) => Ok(t.to_string()),
                (None, Some(e)) => Err(e.to_string()),
                _ => panic!("{job}/{dst}: {r}"),
            };
            (dst, r)
        })
        .collect()
}

fn try_render(job: &str, template: &str, props: &Value, links: &Value) -> Result<String, String> {
    require_tool("ruby", "ruby");
    let renderer = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bosh-render.rb");
    let o = Command::new("ruby")
        .arg(renderer)
        .arg(release().join("jobs").join(job))
        .arg(template)
        .arg(props.to_string())
        .arg(links.to_string())
        .output()
        .unwrap();
    if o.status.success() {
        Ok(String::from_utf8(o.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&o.stderr).into_owned())
    }
}

pub(crate) fn job_spec(job: &str) -> Value {
    yaml_file(&release().join("jobs").join(job).join("spec"))
}

/// Every file under `dir`, as paths relative to it (`bbr/backup.erb`).
fn template_files(dir: &Path, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for name in dir_names(dir) {
        let path = dir.join(&name);
        if path.is_dir() {
            out.extend(template_files(&path, &format!("{prefix}{name}/")));
        } else {
            out.insert(format!("{prefix}{name}"));
        }
    }
    out
}

fn dir_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Every key path the `airlock serve --config` file has (the project's
/// serve config contract); `user.*` are the `[[user]]` entries'.
const CONTRACT_KEYS: &[&str] = &[
    "listen",
    "plain_http",
    "store.path",
    "store.url",
    "store.s3_endpoint",
    "store.s3_region",
    "store.s3_ca_file",
    "store.s3_single_writer",
    "store.s3_connect_timeout",
    "store.s3_first_byte_timeout",
    "store.s3_idle_timeout",
    "store.s3_operation_timeout",
    "tls.cert",
    "tls.key",
    "tls.client_ca",
    "auth.anonymous_read",
    "user.name",
    "user.password_hash",
    "user.roles",
    "user.repositories",
    "registry.allow_push",
    "registry.allow_delete",
    "registry.mirror_namespace",
    "registry.blob_redirect",
    "limits.max_blob_size",
    "limits.max_upload_sessions",
    "limits.max_connections",
    "limits.header_timeout_secs",
    "limits.idle_timeout_secs",
    "limits.shutdown_delay_secs",
    "limits.shutdown_timeout_secs",
    "stacks.allow_admin",
    "import.keyring",
    "torcx.keys",
    "gc.keep_generations",
    "gc.keep_days",
    "gc.interval",
    "gc.grace",
];

fn key_paths(prefix: &str, t: &toml::Table, out: &mut BTreeSet<String>) {
    for (k, v) in t {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(inner) if path != "torcx.keys" => key_paths(&path, inner, out),
            toml::Value::Array(items)
                if items.iter().all(|i| i.is_table()) && !items.is_empty() =>
            {
                for i in items {
                    key_paths(&path, i.as_table().unwrap(), out);
                }
            }
            _ => {
                out.insert(path);
            }
        }
    }
}

/// Checks a rendered `airlock serve --config` file (paths already pointing
/// at files that exist): TOML whose every key is in the contract.
/// What `airlock serve --check-config` must say of a rendered config:
/// accepted, or refused with a cause containing this text.
#[derive(Clone, Copy)]
enum Check {
    Accepted,
    RefusedWith(&'static str),
}

fn check_serve_config(path: &Path, check: Check) -> toml::Table {
    let text = std::fs::read_to_string(path).unwrap();
    let table: toml::Table = text
        .parse()
        .unwrap_or_else(|e| panic!("rendered airlock.toml is not TOML: {e}\n{text}"));
    let mut keys = BTreeSet::new();
    key_paths("", &table, &mut keys);
    let unknown: Vec<_> = keys
        .iter()
        .filter(|k| !CONTRACT_KEYS.contains(&k.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "keys outside the contract: {unknown:?}\n{text}"
    );
    // airlock itself reads it: every key, the files it names, the values.
    let out = airlock(&[
        "serve",
        "--config",
        path.to_str().unwrap(),
        "--check-config",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    match check {
        Check::Accepted => assert!(out.status.success(), "check-config refused: {stderr}"),
        Check::RefusedWith(cause) => assert!(
            !out.status.success() && stderr.contains(cause),
            "check-config should refuse with {cause:?}: {stderr}"
        ),
    }
    table
}

/// Renders every template of the airlock job into `root` (as
/// /var/vcap/jobs/airlock would hold them), rewrites the config's job paths
/// to `root`, and checks it. Returns (config, bpm.yml as JSON).
fn render_airlock(props: &Value, root: &Path, check: Check) -> (toml::Table, Value) {
    let job_dir = root.join("jobs/airlock");
    for (dst, text) in render_all("airlock", props, &json!({})) {
        let text = text.unwrap_or_else(|e| panic!("{e}"));
        let out = job_dir.join(&dst);
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        // The config names files the job renders: point it at these copies.
        let text = if dst == "config/airlock.toml" {
            text.replace(
                "/var/vcap/jobs/airlock/",
                &format!("{}/", job_dir.display()),
            )
        } else {
            text
        };
        std::fs::write(&out, text).unwrap();
        if dst.starts_with("bin/") {
            run_ok(Command::new("bash").arg("-n").arg(&out));
        }
    }
    let config = check_serve_config(&job_dir.join("config/airlock.toml"), check);
    let bpm = yaml_file(&job_dir.join("config/bpm.yml"));
    (config, bpm)
}

#[test]
fn specs_parse_and_name_files_that_exist() {
    let rel = release();
    let final_yml = yaml_file(&rel.join("config/final.yml"));
    assert_eq!(final_yml["name"], "airlock");
    assert!(final_yml["blobstore"]["provider"].is_string());
    assert!(yaml_file(&rel.join("config/blobs.yml")).is_object());
    let packages = dir_names(&rel.join("packages"));
    assert_eq!(dir_names(&rel.join("jobs")), ["airlock", "airlock-rootfs"]);
    for job in dir_names(&rel.join("jobs")) {
        let dir = rel.join("jobs").join(&job);
        let spec = job_spec(&job);
        assert_eq!(spec["name"], job.as_str());
        let templates = spec["templates"].as_object().unwrap();
        let mut named = BTreeSet::new();
        for (src, dst) in templates {
            assert!(
                dir.join("templates").join(src).is_file(),
                "{job}: template {src} is missing"
            );
            assert!(
                !dst.as_str().unwrap().starts_with('/'),
                "{job}: {dst} must be relative"
            );
            named.insert(src.clone());
        }
        let present = template_files(&dir.join("templates"), "");
        assert_eq!(present, named, "{job}: templates/ and the spec disagree");
        for p in spec["packages"].as_array().unwrap() {
            assert!(
                packages.contains(&p.as_str().unwrap().to_string()),
                "{job}: package {p}"
            );
        }
        for (name, decl) in spec["properties"].as_object().unwrap() {
            let d = decl["description"].as_str().unwrap_or("");
            assert!(
                !d.trim().is_empty(),
                "{job}: property {name} has no description"
            );
        }
        let monit = std::fs::read_to_string(dir.join("monit")).unwrap();
        assert!(
            monit.contains(&format!("check process {job}\n")),
            "{job}: monit"
        );
        assert!(
            monit.contains(&format!("/var/vcap/sys/run/bpm/{job}/{job}.pid")),
            "{job}: monit"
        );
        assert!(
            monit.contains(&format!("bpm start {job}\"")),
            "{job}: monit"
        );
    }
    let airlock = job_spec("airlock");
    assert_eq!(airlock["provides"][0]["name"], "airlock");
    assert!(airlock["templates"]["drain.erb"] == "bin/drain");
    // bbr finds its scripts by these names (BOSH Backup and Restore
    // developer's guide).
    for script in [
        "metadata",
        "pre-backup-lock",
        "backup",
        "post-backup-unlock",
        "restore",
    ] {
        assert_eq!(
            airlock["templates"][format!("bbr/{script}.erb")],
            format!("bin/bbr/{script}"),
            "bbr {script}"
        );
    }
    let rootfs = job_spec("airlock-rootfs");
    assert_eq!(
        rootfs["consumes"][0]["type"],
        airlock["provides"][0]["type"]
    );
    assert!(rootfs["templates"]["pre-start.erb"] == "bin/pre-start");
    // Every property the link hands over is declared.
    for p in airlock["provides"][0]["properties"].as_array().unwrap() {
        assert!(
            airlock["properties"].get(p.as_str().unwrap()).is_some(),
            "link property {p}"
        );
    }

    // The package: rust-1-linux is vendored from bosh-package-rust-release
    // (the README says how); the build is offline from vendored crates.
    assert_eq!(packages, ["airlock"]);
    let pkg = yaml_file(&rel.join("packages/airlock/spec"));
    assert_eq!(pkg["name"], "airlock");
    assert_eq!(pkg["dependencies"], json!(["rust-1-linux"]));
    let files: Vec<&str> = pkg["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    for f in [
        "airlock/Cargo.toml",
        "airlock/Cargo.lock",
        "airlock/src/**/*",
        "airlock/vendor/**/*",
        "airlock/.cargo/config.toml",
    ] {
        assert!(files.contains(&f), "package files lack {f}");
    }
    let packaging = std::fs::read_to_string(rel.join("packages/airlock/packaging")).unwrap();
    assert!(packaging.contains("source /var/vcap/packages/rust-1-linux/bosh/compile.env"));
    assert!(packaging.contains("cargo build --release --offline --locked"));
    assert!(packaging.contains("${BOSH_INSTALL_TARGET}/bin/airlock"));
    let readme = std::fs::read_to_string(rel.join("README.md")).unwrap();
    assert!(readme.contains("bosh vendor-package rust-1-linux"));
    assert!(readme.contains("scripts/bosh-release-src.sh"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bosh-release-src.sh");
    run_ok(Command::new("bash").arg("-n").arg(&script));
}

#[test]
fn airlock_job_renders_with_defaults() {
    let tmp = tempfile::tempdir().unwrap();
    // No TLS and a public address: the render refuses to serve plain HTTP
    // there unless the operator says so (airlock.plain_http), as airlock
    // itself would.
    let err = try_render("airlock", "airlock.toml.erb", &json!({}), &json!({})).unwrap_err();
    assert!(
        err.contains("airlock.plain_http must be true to serve plain HTTP on 0.0.0.0"),
        "{err}"
    );
    let (config, bpm) = render_airlock(
        &json!({"airlock": {"plain_http": true}}),
        tmp.path(),
        Check::Accepted,
    );
    assert_eq!(config["listen"].as_str(), Some("0.0.0.0:443"));
    assert_eq!(
        config["store"]["path"].as_str(),
        Some("/var/vcap/store/airlock")
    );
    assert!(config.get("tls").is_none() && config.get("user").is_none());
    assert_eq!(config["limits"]["max_blob_size"].as_str(), Some("64G"));
    assert_eq!(config["limits"]["max_connections"].as_integer(), Some(4096));
    assert_eq!(
        config["limits"]["shutdown_delay_secs"].as_integer(),
        Some(0)
    );
    let p = &bpm["processes"][0];
    assert_eq!(p["name"], "airlock");
    assert_eq!(p["executable"], "/var/vcap/packages/airlock/bin/airlock");
    assert_eq!(
        p["args"],
        json!([
            "serve",
            "--config",
            "/var/vcap/jobs/airlock/config/airlock.toml"
        ])
    );
    assert_eq!(p["persistent_disk"], true);
    assert_eq!(p["env"]["TMPDIR"], "/var/vcap/data/airlock/tmp");
    assert_eq!(p["limits"]["memory"], "2G");
    assert_eq!(p["limits"]["open_files"], 65536);
    assert_eq!(p["capabilities"], json!(["NET_BIND_SERVICE"]));
    // The server waits for requests in flight as long as drain does.
    assert_eq!(
        config["limits"]["shutdown_timeout_secs"].as_integer(),
        Some(600)
    );
}

#[test]
fn airlock_job_renders_s3_tls_users_and_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let (crt, key) = self_signed_cert(tmp.path(), "server", "airlock");
    let cert = std::fs::read_to_string(&crt).unwrap();
    let props = json!({"airlock": {
        "port": 8443,
        "store": {"url": "s3://blobs/airlock", "s3_endpoint": "https://minio.internal:9000", "s3_region": "eu-central-1",
                  "s3_access_key_id": "AKID", "s3_secret_access_key": "s3cr\"et", "s3_ca": cert,
                  "s3_single_writer": true, "s3_timeouts": {"first_byte": "20s", "operation": "1m"}},
        "tls": {"cert": cert, "key": std::fs::read_to_string(&key).unwrap(), "client_ca": cert, "ca": cert},
        "users": [{"name": "ops", "password_hash": "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA", "roles": ["admin"]},
                  {"name": "cell", "password_hash": "$argon2id$x", "roles": ["cell"], "repositories": ["stacks/"]}],
        "import": {"keyring": "-----BEGIN PGP PUBLIC KEY BLOCK-----\n...\n"},
        "torcx": {"keys": {"stable": "-----BEGIN PGP PRIVATE KEY BLOCK-----\n...\n", "beta": "-----BEGIN PGP PRIVATE KEY BLOCK-----\nK\n"}},
        "gc": {"keep_generations": 10, "interval": "12h"},
        "registry": {"mirror_namespace": "docker.io", "allow_push": true, "blob_redirect": true},
        "bpm": {"memory_limit": "8G"},
        "limits": {"shutdown_delay_secs": 5},
    }});
    // S3 is rendered as the contract says and airlock accepts it
    // (`--check-config` does not contact the store); what it refuses here
    // is the torcx keys, which pre-start writes on the VM.
    let (config, bpm) = render_airlock(
        &props,
        tmp.path(),
        Check::RefusedWith("/var/vcap/data/airlock/torcx/"),
    );
    let job = tmp.path().join("jobs/airlock");
    assert_eq!(config["listen"].as_str(), Some("0.0.0.0:8443"));
    assert_eq!(config["store"]["url"].as_str(), Some("s3://blobs/airlock"));
    assert_eq!(
        config["store"]["s3_endpoint"].as_str(),
        Some("https://minio.internal:9000")
    );
    assert!(config["store"].get("path").is_none());
    assert_eq!(config["store"]["s3_single_writer"].as_bool(), Some(true));
    assert_eq!(
        config["store"]["s3_first_byte_timeout"].as_str(),
        Some("20s")
    );
    assert_eq!(config["store"]["s3_operation_timeout"].as_str(), Some("1m"));
    assert!(config["store"].get("s3_idle_timeout").is_none());
    let s3_ca = config["store"]["s3_ca_file"].as_str().unwrap();
    assert_eq!(std::fs::read_to_string(s3_ca).unwrap().trim(), cert.trim());
    let tls_cert = config["tls"]["cert"].as_str().unwrap();
    assert_eq!(
        std::fs::read_to_string(tls_cert).unwrap().trim(),
        cert.trim()
    );
    assert_eq!(
        Path::new(config["tls"]["client_ca"].as_str().unwrap()),
        job.join("config/tls/client_ca.crt")
    );
    let users = config["user"].as_array().unwrap();
    assert_eq!(users.len(), 2);
    assert_eq!(
        users[0]["password_hash"].as_str(),
        Some("$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA")
    );
    assert_eq!(
        users[1]["repositories"].as_array().unwrap()[0].as_str(),
        Some("stacks/")
    );
    assert_eq!(config["registry"]["allow_push"].as_bool(), Some(true));
    assert_eq!(config["registry"]["blob_redirect"].as_bool(), Some(true));
    assert!(
        std::fs::read_to_string(config["import"]["keyring"].as_str().unwrap())
            .unwrap()
            .contains("PGP PUBLIC KEY")
    );
    assert_eq!(
        config["torcx"]["keys"]["stable"].as_str(),
        Some("/var/vcap/data/airlock/torcx/stable.sec.asc")
    );
    assert_eq!(config["gc"]["keep_generations"].as_integer(), Some(10));
    assert_eq!(
        config["limits"]["shutdown_delay_secs"].as_integer(),
        Some(5)
    );
    let p = &bpm["processes"][0];
    assert_eq!(p["env"]["AWS_ACCESS_KEY_ID"], "AKID");
    assert_eq!(p["env"]["AWS_SECRET_ACCESS_KEY"], "s3cr\"et");
    assert_eq!(p["limits"]["memory"], "8G");
    assert!(p.get("capabilities").is_none());
    // pre-start writes both torcx keys where the config names them.
    let pre = std::fs::read_to_string(job.join("bin/pre-start")).unwrap();
    assert!(
        pre.contains("\"$torcx_dir/beta.sec.asc\"")
            && pre.contains("\"$torcx_dir/stable.sec.asc\"")
    );
    // and the server's TMPDIR (bpm.yml), on the ephemeral disk.
    assert!(pre.contains("tmp_dir=/var/vcap/data/airlock/tmp\n"));
    assert!(pre.contains("own vcap:vcap \"$tmp_dir\""));
    // A cert without its key is refused at render time.
    let half = json!({"airlock": {"tls": {"cert": cert}}});
    let err = try_render("airlock", "airlock.toml.erb", &half, &json!({})).unwrap_err();
    assert!(
        err.contains("airlock.tls.cert and airlock.tls.key go together"),
        "{err}"
    );
    // A shutdown delay bpm would cut short (SIGKILL 20 s after SIGTERM).
    let long = json!({"airlock": {"limits": {"shutdown_delay_secs": 20}}});
    let err = try_render("airlock", "airlock.toml.erb", &long, &json!({})).unwrap_err();
    assert!(
        err.contains("airlock.limits.shutdown_delay_secs must be an integer from 0 to 19 (bpm kills the process 20 s after SIGTERM), not 20"),
        "{err}"
    );
}

/// The arguments a rendered bin/sync passes to airlock, as bash splits them.
fn sync_words(sync: &str) -> Vec<String> {
    let exec = sync.lines().find(|l| l.starts_with("exec ")).unwrap();
    let exec = exec.replacen("exec /var/vcap/packages/airlock/bin/airlock", "words", 1);
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -- ; words() {{ printf '%s\\n' \"$@\"; }}; {exec}"
        ))
        .output()
        .unwrap();
    assert!(o.status.success());
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect()
}

fn link() -> Value {
    json!({"airlock": {"address": "q-s0.airlock.default.airlock.bosh",
        "properties": {"airlock": {"port": 443, "plain_http": false, "tls": {"cert": "CERT", "ca": "LINKED CA"}}}}})
}

#[test]
fn airlock_rootfs_job_renders() {
    let tmp = tempfile::tempdir().unwrap();
    let pem =
        |kind: &str, body: &str| format!("-----BEGIN {kind}-----\n{body}\n-----END {kind}-----");
    let (one, two) = (pem("CERTIFICATE", "ONE"), pem("CERTIFICATE", "TWO") + "\n");
    let props = json!({"airlock_rootfs": {"stacks": ["cflinuxfs4", "bookworm"], "trusted_certs": [one, two],
        "username": "cell", "password": "pw d",
        "tls": {"cert": pem("CERTIFICATE", "C"), "key": pem("PRIVATE KEY", "K")}}});
    let spec = job_spec("airlock-rootfs");
    for (src, dst) in spec["templates"].as_object().unwrap() {
        let text = render("airlock-rootfs", src, &props, &link());
        let out = tmp.path().join(dst.as_str().unwrap());
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        std::fs::write(&out, &text).unwrap();
        if dst.as_str().unwrap().starts_with("bin/") {
            run_ok(Command::new("bash").arg("-n").arg(&out));
        }
    }
    let sync = std::fs::read_to_string(tmp.path().join("bin/sync")).unwrap();
    let words = sync_words(&sync);
    let want: Vec<String> = [
        "cell",
        "sync",
        "--url",
        "https://q-s0.airlock.default.airlock.bosh:443",
        "--install-dir",
        "/var/vcap/data/airlock-rootfs",
        "--cell-id",
        "5f3c2a0e-9d1b-4c8e-a7f6-0b1d2e3f4a5b",
        "--interval",
        "60",
        "--stack",
        "cflinuxfs4",
        "--stack",
        "bookworm",
        "--trusted-certs",
        "/var/vcap/jobs/airlock-rootfs/config/certs/trusted_certs.crt",
        "--ca-file",
        "/var/vcap/jobs/airlock-rootfs/config/certs/airlock_ca.crt",
        "--user",
        "cell",
        "--password-file",
        "/var/vcap/jobs/airlock-rootfs/config/password",
        "--cert",
        "/var/vcap/jobs/airlock-rootfs/config/certs/client.crt",
        "--key",
        "/var/vcap/jobs/airlock-rootfs/config/certs/client.key",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(words, want);
    let certs = std::fs::read_to_string(tmp.path().join("config/certs/trusted_certs.crt")).unwrap();
    assert_eq!(certs.trim_end(), format!("{one}\n{}", two.trim_end()));
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("config/certs/airlock_ca.crt"))
            .unwrap()
            .trim(),
        "LINKED CA"
    );
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("config/password"))
            .unwrap()
            .trim_end(),
        "pw d"
    );
    let pre = std::fs::read_to_string(tmp.path().join("bin/pre-start")).unwrap();
    assert!(pre.contains("/var/vcap/jobs/airlock-rootfs/bin/sync --once"));
    let bpm = yaml_file(&tmp.path().join("config/bpm.yml"));
    assert_eq!(
        bpm["processes"][0]["executable"],
        "/var/vcap/jobs/airlock-rootfs/bin/sync"
    );
    assert_eq!(bpm["processes"][0]["ephemeral_disk"], true);

    // Without a link: the url property, an install dir elsewhere under /var/vcap.
    let props = json!({"airlock_rootfs": {"stacks": ["bookworm"], "url": "http://10.0.0.5:5000",
        "install_dir": "/var/vcap/store/rootfs", "cell_id": "diego-cell/7"}});
    let sync = render("airlock-rootfs", "sync.erb", &props, &json!({}));
    let words = sync_words(&sync);
    assert_eq!(
        words[2..8],
        [
            "--url",
            "http://10.0.0.5:5000",
            "--install-dir",
            "/var/vcap/store/rootfs",
            "--cell-id",
            "diego-cell/7"
        ]
    );
    assert!(!sync.contains("--ca-file") && !sync.contains("--user"));
    let bpm = yaml_text(
        &render("airlock-rootfs", "bpm.yml.erb", &props, &json!({})),
        tmp.path(),
    );
    assert_eq!(
        bpm["processes"][0]["additional_volumes"],
        json!([{"path": "/var/vcap/store/rootfs", "writable": true}])
    );
    // Neither link nor url, or no stack: a render error that says so.
    let err = try_render(
        "airlock-rootfs",
        "sync.erb",
        &json!({"airlock_rootfs": {"stacks": ["x"]}}),
        &json!({}),
    )
    .unwrap_err();
    assert!(
        err.contains("set airlock_rootfs.url or link an airlock job"),
        "{err}"
    );
    let err = try_render("airlock-rootfs", "sync.erb", &json!({}), &link()).unwrap_err();
    assert!(err.contains("airlock_rootfs.stacks is empty"), "{err}");
}

#[test]
fn example_manifest_and_ops_file() {
    let rel = release();
    let tmp = tempfile::tempdir().unwrap();
    let m = yaml_file(&rel.join("manifests/airlock.yml"));
    let job = m["instance_groups"][0]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "airlock")
        .unwrap();
    assert_eq!(job["provides"]["airlock"]["shared"], true);
    // The manifest's properties are declared ones and render, with its
    // variables interpolated as the director does (CredHub certificates,
    // the -v hashes, the --var-file keyring), and airlock accepts them.
    make_ca(tmp.path(), "airlock_ca");
    issue(
        tmp.path(),
        "airlock_ca",
        "airlock_tls",
        "airlock",
        SERVER_EXT,
    );
    let read = |f: &str| std::fs::read_to_string(tmp.path().join(f)).unwrap();
    let (_, public) = test_key();
    let vars = [
        ("((airlock_tls.certificate))", read("airlock_tls.crt")),
        ("((airlock_tls.private_key))", read("airlock_tls.key")),
        ("((airlock_tls.ca))", read("airlock_ca.crt")),
        (
            "((airlock_ops_password_hash))",
            airlock::auth::password::hash("ops pw").unwrap(),
        ),
        (
            "((airlock_cell_password_hash))",
            airlock::auth::password::hash("cell pw").unwrap(),
        ),
        (
            "((airlock_import_keyring))",
            std::fs::read_to_string(&public).unwrap(),
        ),
    ];
    let mut text = job["properties"].to_string();
    for (var, value) in &vars {
        assert!(text.contains(var), "the manifest uses {var}");
        text = text.replace(
            &format!("\"{var}\""),
            &Value::from(value.as_str()).to_string(),
        );
    }
    assert!(!text.contains("(("), "uninterpolated: {text}");
    let props: Value = serde_json::from_str(&text).unwrap();
    let (config, _) = render_airlock(&props, tmp.path(), Check::Accepted);
    assert_eq!(config["user"].as_array().unwrap().len(), 2);

    let ops = yaml_file(&rel.join("manifests/operations/add-airlock-rootfs.yml"));
    let ops = ops.as_array().unwrap();
    let default_dir =
        job_spec("airlock-rootfs")["properties"]["airlock_rootfs.install_dir"]["default"].clone();
    let rootfs = format!(
        "{}/((airlock_stack))/rootfs.tar",
        default_dir.as_str().unwrap()
    );
    // `airlock stack cell-properties` names the same directory by default.
    let help = airlock_ok(&["stack", "cell-properties", "--help"]);
    assert!(
        help.contains(&format!("[default: {}]", default_dir.as_str().unwrap())),
        "{help}"
    );
    let value_at = |path: &str| {
        ops.iter()
            .find(|o| o["path"] == path)
            .map(|o| o["value"].clone())
    };
    assert_eq!(
        value_at(
            "/instance_groups/name=diego-cell/jobs/name=garden/properties/garden/persistent_image_list/-"
        ),
        Some(json!(rootfs))
    );
    assert_eq!(
        value_at(
            "/instance_groups/name=diego-cell/jobs/name=rep/properties/diego/rep/preloaded_rootfses/-"
        ),
        Some(json!(format!("((airlock_stack)):{rootfs}")))
    );
    let job = value_at("/instance_groups/name=diego-cell/jobs/name=airlock-rootfs?").unwrap();
    assert_eq!(job["release"], "airlock");
    // ((airlock_stack)) as the director interpolates it.
    let props: Value = serde_json::from_str(
        &job["properties"]
            .to_string()
            .replace("((airlock_stack))", "cflinuxfs4"),
    )
    .unwrap();
    let sync = render("airlock-rootfs", "sync.erb", &props, &link());
    let words = sync_words(&sync);
    assert!(
        words.windows(2).any(|w| w == ["--stack", "cflinuxfs4"]),
        "{words:?}"
    );
}
