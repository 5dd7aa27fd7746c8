//! Builders (issue 39): kpack's rules for a stack's build and run images at
//! `stack promote` and `bundle create`, and the documents `airlock stack
//! kpack` prints, read as the API server and kpack read them
//! ([`common::kpack::validate`]) on a site where anonymous reads are off:
//! kpack's credentials for the ClusterStack's images pull them (curl with
//! exactly those credentials), anonymous reads are refused.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::images::{OCI_MANIFEST, sha256};
use common::kpack::validate;
use common::site::*;
use common::*;

const ID: &str = "--config.label=io.buildpacks.stack.id=io.airlock.test";
const CNB: [&str; 2] = [
    "--config.env=CNB_USER_ID=1000",
    "--config.env=CNB_GROUP_ID=1000",
];

/// The fixture retagged (`umoci config`) as build and run images, each
/// `(tag, mixins label or None, is a build image)`.
const IMAGES: &[(&str, Option<&str>, bool)] = &[
    ("build", Some(r#"["curl","git","build:gcc"]"#), true),
    ("run", Some(r#"["curl","git","run:tzdata"]"#), false),
    ("run-short", Some(r#"["git"]"#), false),
    ("build-runonly", Some(r#"["curl","run:tzdata"]"#), true),
    ("build-badlabel", Some("curl"), true),
    (
        "run-buildonly",
        Some(r#"["curl","git","build:gcc"]"#),
        false,
    ),
];

/// A copy of the fixture layout under `dir` with [`IMAGES`] tagged in it.
fn layout(dir: &Path) -> PathBuf {
    require_tool("umoci", "umoci");
    let layout = copy_fixture_layout(dir);
    let l = |tag: &str| format!("{}:{tag}", layout.display());
    for (tag, mixins, build) in IMAGES {
        let mut args = vec![ID.to_string()];
        if let Some(m) = mixins {
            args.push(format!("--config.label=io.buildpacks.stack.mixins={m}"));
        }
        if *build {
            args.extend(CNB.iter().map(|s| s.to_string()));
        }
        run_ok(
            Command::new("umoci")
                .args(["config", "--image", &l("latest"), "--tag", tag])
                .args(&args),
        );
    }
    layout
}

/// Token users of the site (`airlock user list --json`).
fn token_users(site: &Site) -> Vec<String> {
    let config = site.dir.join("airlock.toml");
    let list = site.airlock_ok(&[
        "user",
        "list",
        "--json",
        "--config",
        config.to_str().unwrap(),
    ]);
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .filter(|u| u["kind"] == "token")
        .map(|u| u["name"].as_str().unwrap().to_string())
        .collect()
}

/// `airlock ARGS` must fail with `cause` on stderr, leaving the state and
/// the token users as they were.
fn refused(site: &Site, args: &[&str], cause: &str) {
    let (generations, users) = (site.history().len(), token_users(site));
    let o = site.airlock(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{args:?} succeeded");
    assert!(err.contains(cause), "{args:?}: {err}");
    assert_eq!(site.history().len(), generations, "{args:?} committed");
    assert_eq!(token_users(site), users, "{args:?} made a token user");
}

fn promote(stack: &str, build: &str, run: &str) -> Vec<String> {
    [
        "stack",
        "promote",
        stack,
        "--image",
        "stacks/bb:latest",
        "--build-image",
        &format!("stacks/bb-build:{build}"),
        "--run-image",
        &format!("stacks/bb-run:{run}"),
    ]
    .map(str::to_string)
    .to_vec()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn kpack_reads_the_stack_it_is_given_on_a_site_without_anonymous_reads() {
    require_tool("skopeo", "skopeo");
    let site = site_on(None, "", "", "");
    let _server = site.start();
    let layout = layout(&site.dir);
    let l = |tag: &str| format!("oci:{}:{tag}", layout.display());
    site.push(&l("latest"), "stacks/bb:latest");
    for (tag, _, build) in IMAGES {
        let repo = if *build {
            "stacks/bb-build"
        } else {
            "stacks/bb-run"
        };
        site.push(&l(tag), &format!("{repo}:{tag}"));
    }

    // kpack's mixin rules, with kpack's words, before anything is committed.
    for (build, run, cause) in [
        (
            "build",
            "run-short",
            "runImage missing required mixin(s): curl",
        ),
        (
            "build-runonly",
            "run",
            "build image contains run-only mixin(s): run:tzdata",
        ),
        (
            "build",
            "run-buildonly",
            "run image contains build-only mixin(s): build:gcc",
        ),
        (
            "build-badlabel",
            "run",
            "label io.buildpacks.stack.mixins is not a JSON array of strings",
        ),
    ] {
        refused(&site, &strs(&promote("bb", build, run)), cause);
    }
    site.airlock_ok(&strs(&promote("bb", "build", "run")));

    // Without --pull-secret: kpack would read anonymously, which this site refuses.
    let addr = site.addr();
    let out = site.airlock_ok(&["stack", "kpack", "bb", "--registry", &addr]);
    assert!(out.contains("# No serviceAccountRef"), "{out}");
    let pulls = validate(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    for p in &pulls {
        assert_eq!(p.credentials, None, "{p:?}");
        let path = format!("/v2/{}/manifests/{}", p.repository, p.digest);
        let (code, _, body) = site.curl(&[&path, "-H", &format!("Accept: {OCI_MANIFEST}")]);
        assert_eq!(code, 401, "anonymous {path}: {body}");
    }

    // With it: Secret, ServiceAccount, then the ClusterStack naming them.
    let out = site.airlock_ok(&[
        "stack",
        "kpack",
        "bb",
        "--registry",
        &addr,
        "--namespace",
        "builds",
        "--pull-secret",
    ]);
    let kinds: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("kind: "))
        .collect();
    assert_eq!(kinds, ["Secret", "ServiceAccount", "ClusterStack"], "{out}");
    let pulls = validate(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let want = [
        (
            "buildImage",
            "stacks/bb-build",
            layout_ref_digest(&layout, "build"),
        ),
        (
            "runImage",
            "stacks/bb-run",
            layout_ref_digest(&layout, "run"),
        ),
    ];
    for (p, (field, repo, digest)) in pulls.iter().zip(&want) {
        assert_eq!((p.field.as_str(), p.repository.as_str()), (*field, *repo));
        assert_eq!(&p.digest, digest, "{field}");
        assert_eq!(
            p.registry, addr,
            "{field}: kpack would pull from another registry"
        );
        let (user, password) = p
            .credentials
            .clone()
            .unwrap_or_else(|| panic!("{field}: anonymous"));
        let path = format!("/v2/{repo}/manifests/{digest}");
        let accept = format!("Accept: {OCI_MANIFEST}");
        let creds = format!("{user}:{password}");
        let (code, _, body) = site.curl(&[&path, "-u", &creds, "-H", &accept]);
        assert_eq!(
            code, 200,
            "{path} with the ServiceAccount's credentials: {body}"
        );
        assert_eq!(&sha256(body.as_bytes()), digest);
        let (code, _, _) = site.curl(&[&path, "-H", &accept]);
        assert_eq!(code, 401, "anonymous {path}");
    }
}

#[test]
fn names_namespaces_and_registries_are_what_kubernetes_and_kpack_accept() {
    let site = site_on(None, "", "", "");
    let _server = site.start();
    let layout = layout(&site.dir);
    let l = |tag: &str| format!("oci:{}:{tag}", layout.display());
    site.push(&l("latest"), "stacks/bb:latest");
    site.push(&l("build"), "stacks/bb-build:build");
    site.push(&l("run"), "stacks/bb-run:run");
    site.airlock_ok(&strs(&promote("my_stack", "build", "run")));
    let addr = site.addr();
    let kpack = |stack: &str, extra: &[&str]| {
        let mut args = vec!["stack", "kpack", stack, "--registry", &addr];
        args.extend_from_slice(extra);
        args.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let pull = ["--namespace", "builds", "--pull-secret"];

    // `_` is written `-`: names the API server takes.
    let out = site.airlock_ok(&strs(&kpack("my_stack", &pull)));
    validate(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    for line in [
        "  name: \"my-stack\"",
        "  name: \"airlock-my-stack-pull\"",
        "    name: \"airlock-my-stack-pull\"",
    ] {
        assert!(out.lines().any(|l| l == line), "{line:?} in {out}");
    }
    let out = site.airlock_ok(&strs(&kpack("my_stack", &["--name", "builder-base"])));
    validate(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert!(
        out.lines().any(|l| l == "  name: \"builder-base\""),
        "{out}"
    );

    // Two stacks that would be one ClusterStack, a bad --name.
    site.airlock_ok(&strs(&promote("my-stack", "build", "run")));
    refused(
        &site,
        &strs(&kpack("my_stack", &pull)),
        "would both be ClusterStack \"my-stack\"",
    );
    refused(
        &site,
        &strs(&kpack("my_stack", &["--name", "My_Stack"])),
        "is not a Kubernetes object name",
    );
    let out = site.airlock_ok(&strs(&kpack("my-stack", &pull)));
    validate(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));

    // Namespaces and registries refused before a token user is made.
    for ns in ["Builds", "b_x", "a.b", "b-"] {
        refused(
            &site,
            &strs(&kpack("my-stack", &["--namespace", ns, "--pull-secret"])),
            "is not a Kubernetes namespace",
        );
    }
    for (registry, cause) in [
        ("https://airlock.internal", "drop https://"),
        ("localhost", "Docker Hub"),
        ("airlock internal", "' ' is not in a host name"),
        ("airlock.internal/v2", "path"),
        ("airlock.internal:http", "port"),
    ] {
        refused(
            &site,
            &[
                "stack",
                "kpack",
                "my-stack",
                "--registry",
                registry,
                "--namespace",
                "builds",
                "--pull-secret",
            ],
            cause,
        );
    }
    // What is accepted reads as that registry in kpack.
    for registry in [
        "airlock.internal:5000",
        "localhost:5000",
        "[fd00::1]:5000",
        "10.0.0.5",
    ] {
        let out = site.airlock_ok(&["stack", "kpack", "my-stack", "--registry", registry]);
        let pulls = validate(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        assert!(
            pulls.iter().all(|p| p.registry == registry),
            "{registry}: {pulls:?}"
        );
    }
}

#[test]
fn bundle_create_refuses_a_candidate_kpack_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let layout = layout(dir.path());
    let mut images = String::new();
    for tag in ["latest", "build", "run", "run-short"] {
        images.push_str(&format!(
            "[[image]]\nsource = \"oci:{}:{tag}\"\nrepository = \"stacks/bb\"\ntags = [\"{tag}\"]\n\n",
            layout.display()
        ));
    }
    let config = |run: &str| {
        let cfg = dir.path().join(format!("mirror-{run}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "{images}[[stack]]\nname = \"bb\"\nimage = \"stacks/bb:latest\"\nbuild_image = \"stacks/bb:build\"\nrun_image = \"stacks/bb:{run}\"\n"
            ),
        )
        .unwrap();
        cfg
    };
    let out = dir.path().join("bad.tar");
    let o = create_bundle_output(&config("run-short"), &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "bundle create succeeded");
    assert!(
        err.contains("stack candidate bb: kpack would refuse its build and run images: runImage missing required mixin(s): curl"),
        "{err}"
    );
    assert!(!out.exists(), "a refused bundle was written");
    create_bundle(&config("run"), &dir.path().join("good.tar"), &[]);
}

/// The validator itself refuses what the API server and kpack refuse (the
/// documents of issue 39), so the tests above can fail.
#[test]
fn the_validator_refuses_what_kubernetes_and_kpack_refuse() {
    let digest = format!("sha256:{}", "a".repeat(64));
    let stack = |name: &str, registry: &str, sa: &str| {
        format!(
            "apiVersion: kpack.io/v1alpha2\nkind: ClusterStack\nmetadata:\n  name: {name}\nspec:\n  id: io.test\n  buildImage:\n    image: {registry}/stacks/b@{digest}\n  runImage:\n    image: {registry}/stacks/r@{digest}\n{sa}"
        )
    };
    let sa_ref = "  serviceAccountRef:\n    name: sa\n    namespace: builds\n";
    let secret = |name: &str, ns: &str, key: &str| {
        let config = format!(r#"{{"auths":{{"{key}":{{"auth":"dTpw"}}}}}}"#);
        let o = Command::new("sh")
            .args(["-c", "printf %s \"$1\" | base64 -w0", "sh", &config])
            .output()
            .unwrap();
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {ns}\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: {}\n",
            String::from_utf8(o.stdout).unwrap()
        )
    };
    let account = "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: sa\n  namespace: builds\nsecrets:\n- name: pull\n";
    let good = format!(
        "{}---\n{account}---\n{}",
        secret("pull", "builds", "a.b:5000"),
        stack("s", "a.b:5000", sa_ref)
    );
    let pulls = validate(&good).unwrap();
    assert!(
        pulls
            .iter()
            .all(|p| p.credentials == Some(("u".into(), "p".into()))),
        "{pulls:?}"
    );
    // kpack matches https://HOST/v2/ too; another host reads anonymously.
    let v2 = good.replace(
        &secret("pull", "builds", "a.b:5000"),
        &secret("pull", "builds", "https://a.b:5000/v2/"),
    );
    assert!(validate(&v2).unwrap()[0].credentials.is_some());
    let other = good.replace(
        &secret("pull", "builds", "a.b:5000"),
        &secret("pull", "builds", "c.d:5000"),
    );
    assert_eq!(validate(&other).unwrap()[0].credentials, None);
    // A URL is read as the registry "https:" (what the tests above rule out).
    let url = validate(&stack("s", "https://a.b", "")).unwrap();
    assert_eq!(url[0].registry, "https:");
    // No serviceAccountRef: anonymous.
    assert_eq!(
        validate(&stack("s", "a.b:5000", "")).unwrap()[0].credentials,
        None
    );
    for (bad, why) in [
        (stack("my_stack", "a.b:5000", ""), "RFC 1123 subdomain"),
        (stack("s", "a b.c", ""), "not an RFC 3986 authority"),
        (
            stack("s", "a.b:5000", "  serviceAccountRef:\n    name: sa\n"),
            "namespace",
        ),
        (
            stack("s", "a.b:5000", "  extra: 1\n"),
            "unknown field \"extra\"",
        ),
        (stack("s", "a.b:5000", sa_ref), "no such ServiceAccount"),
        (
            format!("{account}---\n{}", stack("s", "a.b:5000", sa_ref)),
            "which does not exist",
        ),
        (
            secret("airlock-my_stack-pull", "builds", "a.b"),
            "RFC 1123 subdomain",
        ),
        (secret("pull", "Builds", "a.b"), "RFC 1123 label"),
        (
            stack("s", "a.b:5000", "").replace(&format!("@{digest}"), ":latest"),
            "not a digest reference",
        ),
    ] {
        let e = validate(&bad).unwrap_err();
        assert!(e.contains(why), "{why}: {e}\n{bad}");
    }
}
