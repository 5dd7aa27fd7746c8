//! A VM's `/var/vcap` in a temp dir for the BOSH job tests: templates
//! rendered by the renderer stand-in (tests/fixtures/bosh-render.rb), every
//! `/var/vcap/` they name pointed at the temp dir, the package's binary the
//! one under test, and the job's scripts and bpm process run from there.

use crate::bosh_release::{job_spec, render, yaml_file};
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use common::*;

/// A VM's `/var/vcap` in a temp dir: the airlock job's templates rendered
/// with `props` into `jobs/airlock/`, every `/var/vcap/` they name pointed
/// here, and `packages/airlock/bin/airlock` the binary under test.
pub(crate) struct Vm {
    pub(crate) root: tempfile::TempDir,
}

impl Vm {
    pub(crate) fn new(props: &Value) -> Vm {
        let root = tempfile::tempdir().unwrap();
        let vm = Vm { root };
        let job = job_spec("airlock");
        for (src, dst) in job["templates"].as_object().unwrap() {
            let text = render("airlock", src, props, &json!({}));
            let text = text.replace("/var/vcap/", &format!("{}/", vm.path().display()));
            let out = vm.job_dir().join(dst.as_str().unwrap());
            std::fs::create_dir_all(out.parent().unwrap()).unwrap();
            std::fs::write(&out, text).unwrap();
            if dst.as_str().unwrap().starts_with("bin/") {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        let bin = vm.path().join("packages/airlock/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_airlock"), bin.join("airlock")).unwrap();
        for dir in ["data/airlock/tmp", "sys/log/airlock", "sys/run/airlock"] {
            std::fs::create_dir_all(vm.path().join(dir)).unwrap();
        }
        vm
    }

    pub(crate) fn path(&self) -> &Path {
        self.root.path()
    }

    pub(crate) fn job_dir(&self) -> PathBuf {
        self.path().join("jobs/airlock")
    }

    /// Runs `jobs/airlock/bin/SCRIPT` with `env` (and the test S3 keys).
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
        let o = self.run(script, env);
        assert!(
            o.status.success(),
            "bin/{script}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// The job's process started as bpm starts it (executable, args and
    /// env from the rendered `config/bpm.yml`), once it answers on `addr`.
    pub(crate) fn start(&self, addr: &str, data: &Path) -> Server {
        let bpm = yaml_file(&self.job_dir().join("config/bpm.yml"));
        let p = &bpm["processes"][0];
        let mut c = Command::new(p["executable"].as_str().unwrap());
        for a in p["args"].as_array().unwrap() {
            c.arg(a.as_str().unwrap());
        }
        for (k, v) in p["env"].as_object().unwrap() {
            c.env(k, v.as_str().unwrap());
        }
        c.envs(common::backend::AWS_ENV);
        spawn_server(&mut c, addr, data)
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
