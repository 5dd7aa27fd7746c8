//! A VM's `/var/vcap` in a temp dir for the BOSH job tests: a job's
//! templates rendered by the renderer stand-in
//! (tests/fixtures/bosh-render.rb), every `/var/vcap/` they name pointed at
//! the temp dir, the package's binary the one under test, and the job's
//! scripts and bpm process run from there (bpm's pid file written where
//! bpm writes it, which the drain script reads).

use crate::bosh_release::{render_all, yaml_file};
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

use serde_json::{Value, json};

use common::*;

/// A VM's `/var/vcap` in a temp dir: `job`'s templates rendered with
/// `props` (and `links`) into `jobs/JOB/`, every `/var/vcap/` they name
/// pointed here, and `packages/airlock/bin/airlock` the binary under test.
pub(crate) struct Vm {
    pub(crate) root: tempfile::TempDir,
    job: String,
}

impl Vm {
    /// The `airlock` job on a new VM.
    pub(crate) fn new(props: &Value) -> Vm {
        Vm::with_job("airlock", props, &json!({}))
    }

    /// `job` on a new VM; panics when a template does not render.
    pub(crate) fn with_job(job: &str, props: &Value, links: &Value) -> Vm {
        let root = tempfile::tempdir().unwrap();
        let vm = Vm {
            root,
            job: job.to_string(),
        };
        for (dst, text) in render_all(job, props, links) {
            let text = text.unwrap_or_else(|e| panic!("{job}: {e}"));
            let text = text.replace("/var/vcap/", &format!("{}/", vm.path().display()));
            let out = vm.job_dir().join(&dst);
            std::fs::create_dir_all(out.parent().unwrap()).unwrap();
            std::fs::write(&out, text).unwrap();
            if dst.starts_with("bin/") {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        let bin = vm.path().join("packages/airlock/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_airlock"), bin.join("airlock")).unwrap();
        for dir in ["data", "sys/log", "sys/run/bpm"] {
            std::fs::create_dir_all(vm.path().join(dir).join(job)).unwrap();
        }
        std::fs::create_dir_all(vm.path().join("data/airlock/tmp")).unwrap();
        vm
    }

    pub(crate) fn path(&self) -> &Path {
        self.root.path()
    }

    pub(crate) fn job_dir(&self) -> PathBuf {
        self.path().join("jobs").join(&self.job)
    }

    /// Runs `jobs/JOB/bin/SCRIPT` with `env` (and the test S3 keys).
    pub(crate) fn run(&self, script: &str, env: &[(&str, &Path)]) -> Output {
        let mut c = Command::new(self.job_dir().join("bin").join(script));
        c.envs(common::backend::AWS_ENV);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    /// [`Vm::run`], asserting success; returns stdout.
    pub(crate) fn run_ok(&self, script: &str, env: &[(&str, &Path)]) -> String {
        stdout_ok(&self.run(script, env), &format!("bin/{script}"))
    }

    /// The job's process as bpm starts it (executable, args and env from
    /// the rendered `config/bpm.yml`), its pid written to
    /// `sys/run/bpm/JOB/PROCESS.pid` as bpm does.
    pub(crate) fn spawn(&self) -> Child {
        let bpm = yaml_file(&self.job_dir().join("config/bpm.yml"));
        let p = &bpm["processes"][0];
        let mut c = Command::new(p["executable"].as_str().unwrap());
        for a in p["args"].as_array().into_iter().flatten() {
            c.arg(a.as_str().unwrap());
        }
        c.env_clear().env("PATH", std::env::var_os("PATH").unwrap());
        for (k, v) in p["env"].as_object().into_iter().flatten() {
            c.env(k, v.as_str().unwrap());
        }
        c.envs(common::backend::AWS_ENV);
        let child = c.spawn().unwrap();
        let name = p["name"].as_str().unwrap();
        std::fs::write(
            self.path()
                .join("sys/run/bpm")
                .join(&self.job)
                .join(format!("{name}.pid")),
            child.id().to_string(),
        )
        .unwrap();
        child
    }

    /// The airlock job's process ([`Vm::spawn`]) once it serves on `addr`
    /// (over TLS when the rendered config has `[tls]`).
    pub(crate) fn start(&self, addr: &str, data: &Path) -> Server {
        let config = std::fs::read_to_string(self.job_dir().join("config/airlock.toml")).unwrap();
        let tls = config.contains("\n[tls]\n");
        adopt_server(self.spawn(), addr, data, tls)
    }
}

/// The properties of a site on the filesystem store `data`, listening on
/// loopback `port` over plain HTTP, with pushes on; callers add theirs.
pub(crate) fn fs_props(data: &Path, port: u16) -> Value {
    json!({"airlock": {
        "listen_address": "127.0.0.1",
        "port": port,
        "plain_http": true,
        "registry": {"allow_push": true},
        "store": {"path": data.display().to_string()},
    }})
}
