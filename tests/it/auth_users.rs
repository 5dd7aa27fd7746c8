//! Users limited to repository prefixes, per-user upload bytes, token users
//! (the kpack pull secret) and the custom-stacks policy, with real
//! `[[user]]` entries over HTTPS: curl for status codes and bodies, skopeo
//! with `--creds` for pulls, `base64` (coreutils) to decode the Secret.

use crate::common;

use std::process::Command;

use common::backend::{Backend, on_backends, settled};
use common::site::*;
use common::*;

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// `GET path` as `user:password`: (status, headers, body).
fn get(site: &Site, path: &str, creds: &str) -> (u16, String, String) {
    site.curl(&[path, "-u", creds])
}

/// The tags of `repo` as `creds` sees them (asserting 200).
fn tags(site: &Site, repo: &str, creds: &str) -> Vec<String> {
    let (code, _, body) = get(site, &format!("/v2/{repo}/tags/list"), creds);
    assert_eq!(code, 200, "{repo} as {creds}: {body}");
    serde_json::from_value(json(&body)["tags"].clone()).unwrap()
}

/// The first layer digest of the fixture's `latest` manifest.
fn first_layer(layout: &std::path::Path) -> String {
    let m = blob_file(layout, &layout_ref_digest(layout, "latest"));
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(m).unwrap()).unwrap();
    m["layers"][0]["digest"].as_str().unwrap().to_string()
}

#[test]
fn prefix_limits_hold_for_catalog_mirror_namespaces_and_mounts() {
    require_tool("skopeo", "skopeo");
    let users = format!(
        "[[user]]\nname = \"lib\"\n{pw}\nroles = [\"reader\"]\nrepositories = [\"library/\"]\n\
         [[user]]\nname = \"dk\"\n{pw}\nroles = [\"reader\"]\nrepositories = [\"docker.io/\"]\n",
        pw = hash("pw"),
    );
    let site = site_with("mirror_namespace = \"docker.io\"", "", &users);
    let _server = site.start();
    let layout = fixture_layout();
    let src = format!("oci:{}:latest", layout.display());
    for dest in [
        "stacks/a:v1",
        "stacks/b:v1",
        "stacks/c:v1",
        "other/x:v1",
        "library/app:only-lib",
        "docker.io/library/app:only-dk",
    ] {
        site.push(&src, dest);
    }

    // The catalog lists only what the user's prefixes cover; paging runs
    // over the filtered list (stk: admin of stacks/ only).
    let catalog = |q: &str, creds: &str| {
        let (code, heads, body) = get(&site, &format!("/v2/_catalog{q}"), creds);
        assert_eq!(code, 200, "{body}");
        let repos: Vec<String> =
            serde_json::from_value(json(&body)["repositories"].clone()).unwrap();
        let link = heads
            .lines()
            .find_map(|l| l.strip_prefix("link: "))
            .map(|l| l.trim().to_string());
        (repos, link)
    };
    let all = [
        "docker.io/library/app",
        "library/app",
        "other/x",
        "stacks/a",
        "stacks/b",
        "stacks/c",
    ];
    assert_eq!(catalog("", "rd:rd-pw").0, all);
    assert_eq!(
        catalog("", "stk:ops-pw"),
        (
            vec!["stacks/a".into(), "stacks/b".into(), "stacks/c".into()],
            None
        )
    );
    let (page, link) = catalog("?n=2", "stk:ops-pw");
    assert_eq!(page, ["stacks/a", "stacks/b"]);
    assert_eq!(
        link.as_deref(),
        Some("</v2/_catalog?n=2&last=stacks/b>; rel=\"next\"")
    );
    assert_eq!(
        catalog("?n=2&last=stacks/b", "stk:ops-pw"),
        (vec!["stacks/c".into()], None)
    );
    // `last` before the user's names (other/x sorts before stacks/).
    assert_eq!(
        catalog("?n=1&last=library/app", "stk:ops-pw"),
        (
            vec!["stacks/a".into()],
            Some("</v2/_catalog?n=1&last=stacks/a>; rel=\"next\"".into())
        )
    );
    assert_eq!(catalog("", "lib:pw").0, ["library/app"]);

    // The default mirror namespace (docker.io): a reader of everything
    // gets the namespaced repository; `lib`, who may not read docker.io/,
    // gets library/app itself, with or without `ns=`.
    assert_eq!(tags(&site, "library/app", "rd:rd-pw"), ["only-dk"]);
    assert_eq!(tags(&site, "library/app", "lib:pw"), ["only-lib"]);
    // The same for manifests, which the registry keeps answers to
    // (`registry::kept`): asked again and again by one caller, a path
    // still means what the next caller's scope makes it mean.
    for _ in 0..4 {
        let (code, _, body) = get(&site, "/v2/library/app/manifests/only-dk", "rd:rd-pw");
        assert_eq!(code, 200, "{body}");
        let (code, _, body) = get(&site, "/v2/library/app/manifests/only-dk", "lib:pw");
        assert_eq!(code, 404, "{body}");
        assert!(body.contains("MANIFEST_UNKNOWN"), "{body}");
        let (code, _, body) = get(&site, "/v2/library/app/manifests/only-lib", "lib:pw");
        assert_eq!(code, 200, "{body}");
        let (code, _, body) = get(&site, "/v2/library/app/manifests/only-lib", "rd:rd-pw");
        assert_eq!(code, 404, "{body}");
    }
    let (code, heads, body) = get(&site, "/v2/library/app/tags/list?ns=docker.io", "lib:pw");
    assert_eq!(code, 200, "{body}");
    assert_eq!(json(&body)["tags"], serde_json::json!(["only-lib"]));
    assert!(!heads.contains("oci-namespace"), "{heads}");
    let (code, heads, body) = get(&site, "/v2/library/app/tags/list?ns=docker.io", "rd:rd-pw");
    assert_eq!(code, 200, "{body}");
    assert_eq!(json(&body)["tags"], serde_json::json!(["only-dk"]));
    assert!(heads.contains("oci-namespace: docker.io"), "{heads}");
    // `dk` may read docker.io/ only: a name that falls back out of the
    // namespace is refused, not served (other/x exists, docker.io/other/x
    // does not).
    let (code, _, body) = get(&site, "/v2/other/x/tags/list?ns=docker.io", "dk:pw");
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("DENIED"), "{body}");
    assert_eq!(tags(&site, "library/app", "dk:pw"), ["only-dk"]);
    let (code, _, body) = get(&site, "/v2/other/x/manifests/v1", "dk:pw");
    assert_eq!(code, 403, "{body}");
    // stk (stacks/ only) reads neither library/app nor its namespaced copy.
    let (code, _, body) = get(&site, "/v2/library/app/tags/list", "stk:ops-pw");
    assert_eq!(code, 403, "{body}");
    let (code, _, body) = get(
        &site,
        "/v2/library/app/tags/list?ns=docker.io",
        "stk:ops-pw",
    );
    assert_eq!(code, 403, "{body}");

    // Writes go where the registry writes them: `ns=DOCKER.IO` (or an
    // alias) names docker.io/stacks/z, outside stk's prefixes.
    for ns in ["DOCKER.IO", "index.docker.io", "docker.io"] {
        let (code, _, body) = site.curl(&[
            &format!("/v2/stacks/z/blobs/uploads/?ns={ns}"),
            "-X",
            "POST",
            "-u",
            "stk:ops-pw",
        ]);
        assert_eq!(code, 403, "ns={ns}: {body}");
    }

    // A mount from a repository stk may not read opens a session (202)
    // instead of linking the blob; from stacks/b it mounts (201).
    let layer = first_layer(&layout);
    let mount = |from: &str| {
        site.curl(&[
            &format!("/v2/stacks/a/blobs/uploads/?mount={layer}&from={from}"),
            "-X",
            "POST",
            "-u",
            "stk:ops-pw",
        ])
    };
    let (code, heads, body) = mount("other/x");
    assert_eq!(code, 202, "{body}");
    let location = heads
        .lines()
        .find_map(|l| l.strip_prefix("location: "))
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(
        site.curl(&[&location, "-X", "DELETE", "-u", "stk:ops-pw"])
            .0,
        204
    );
    let (code, heads, body) = mount("stacks/b");
    assert_eq!(code, 201, "{body}");
    assert!(
        heads.contains(&format!("docker-content-digest: {layer}")),
        "{heads}"
    );
}

/// The `Location` header of a reply.
fn location(heads: &str) -> String {
    heads
        .lines()
        .find_map(|l| l.strip_prefix("location: "))
        .unwrap_or_else(|| panic!("no Location: {heads}"))
        .trim()
        .to_string()
}

#[test]
fn upload_bytes_are_capped_per_user() {
    let site = site_with("", "max_upload_bytes_per_user = \"1K\"", "");
    let _server = site.start();
    let chunk = site.dir.join("600.bin");
    std::fs::write(&chunk, vec![7u8; 600]).unwrap();
    let big = site.dir.join("2000.bin");
    std::fs::write(&big, vec![9u8; 2000]).unwrap();
    let open = |creds: &str| {
        let (code, heads, body) =
            site.curl(&["/v2/stacks/q/blobs/uploads/", "-X", "POST", "-u", creds]);
        assert_eq!(code, 202, "{body}");
        location(&heads)
    };
    let patch = |loc: &str, creds: &str, extra: &[&str]| {
        let mut args = vec![loc, "-X", "PATCH", "-u", creds, "--data-binary", "@600.bin"];
        args.extend_from_slice(extra);
        site.curl(&args)
    };
    // 600 bytes held; 600 more would pass 1 KiB: 413 DENIED naming the key.
    let ops = open("ops:ops-pw");
    let (code, heads, body) = patch(&ops, "ops:ops-pw", &[]);
    assert_eq!(code, 202, "{body}");
    assert!(heads.contains("range: 0-599"), "{heads}");
    let (code, _, body) = patch(&location(&heads), "ops:ops-pw", &[]);
    assert_eq!(code, 413, "{body}");
    assert!(body.contains("DENIED"), "{body}");
    assert!(body.contains("max_upload_bytes_per_user"), "{body}");
    // The same without Content-Length (chunked): refused as it streams.
    let (code, _, body) = patch(
        &ops,
        "ops:ops-pw",
        &["--http1.1", "-H", "Transfer-Encoding: chunked"],
    );
    assert_eq!(code, 413, "{body}");
    // Nothing of the refused chunks was kept.
    let (code, heads, _) = site.curl(&[&ops, "-u", "ops:ops-pw"]);
    assert_eq!(code, 204);
    assert!(heads.contains("range: 0-599"), "{heads}");
    // Another user has a cap of its own.
    let stk = open("stk:ops-pw");
    assert_eq!(patch(&stk, "stk:ops-pw", &[]).0, 202);
    // A whole blob in one POST over the cap: 413, nothing stored.
    let digest = sha256sum(&big);
    let whole = format!("/v2/stacks/q/blobs/uploads/?digest={digest}");
    let post = |creds: &str| {
        let args = [
            whole.as_str(),
            "-X",
            "POST",
            "-u",
            creds,
            "--data-binary",
            "@2000.bin",
        ];
        site.curl(&args)
    };
    let (code, _, body) = post("rd:rd-pw");
    assert_eq!(code, 403, "a reader may not push: {body}");
    let (code, _, body) = post("stk:ops-pw");
    assert_eq!(code, 413, "{body}");
    assert_eq!(
        site.curl(&[
            &format!("/v2/stacks/q/blobs/{digest}"),
            "-I",
            "-u",
            "ops:ops-pw"
        ])
        .0,
        404
    );
    // Cancelling frees the user's bytes: a new session takes 600 again,
    // and the cap still holds after it.
    assert_eq!(
        site.curl(&[&ops, "-X", "DELETE", "-u", "ops:ops-pw"]).0,
        204
    );
    let again = open("ops:ops-pw");
    let (code, heads, body) = patch(&again, "ops:ops-pw", &[]);
    assert_eq!(code, 202, "{body}");
    assert_eq!(patch(&location(&heads), "ops:ops-pw", &[]).0, 413);
}

/// `base64 -d` (coreutils) of `text`.
fn base64_decode(text: &str) -> String {
    String::from_utf8(common::kpack::base64(text).unwrap()).unwrap()
}

// Token users live in the state (a revocation by the CLI reaches the
// server through the store): on the filesystem and on S3, the site's
// config naming the store (one S3 server: moto adds nothing here). The
// other scenarios check the server's authorization, which does not
// depend on the store: filesystem only.
on_backends!([fs, s3s_fs] kpack_pull_secret_is_a_revocable_read_only_token_user);

fn kpack_pull_secret_is_a_revocable_read_only_token_user(b: Backend) {
    require_tool("skopeo", "skopeo");
    require_tool("umoci", "umoci");
    // The waits below for the server to see the token user (and its
    // revocation) are failed logins for that name until it does: on S3
    // under load more than the default throttle's 10 per minute.
    let site = site_on(Some(&b), "", "", "[auth]\nmax_failures = 1000\n");
    let _server = site.start();
    let layout = copy_fixture_layout(&site.dir);
    let l = |tag: &str| format!("{}:{tag}", layout.display());
    let label = "--config.label=io.buildpacks.stack.id=io.airlock.test";
    for (tag, args) in [
        (
            "build",
            &[
                label,
                "--config.env=CNB_USER_ID=1000",
                "--config.env=CNB_GROUP_ID=1000",
            ][..],
        ),
        ("run", &[label][..]),
    ] {
        run_ok(
            Command::new("umoci")
                .args(["config", "--image", &l("latest"), "--tag", tag])
                .args(args),
        );
    }
    site.push(&format!("oci:{}", l("latest")), "stacks/bb:latest");
    site.push(&format!("oci:{}", l("build")), "stacks/bb-build:1");
    site.push(&format!("oci:{}", l("run")), "stacks/bb-run:1");
    site.push(&format!("oci:{}", l("latest")), "other/x:1");
    site.airlock_ok(&[
        "stack",
        "promote",
        "bb",
        "--image",
        "stacks/bb:latest",
        "--build-image",
        "stacks/bb-build:1",
        "--run-image",
        "stacks/bb-run:1",
    ]);
    let out = site.airlock_ok(&[
        "stack",
        "kpack",
        "bb",
        "--registry",
        &site.addr(),
        "--namespace",
        "builds",
        "--pull-secret",
    ]);
    // Secret, ServiceAccount, ClusterStack (tests/it/kpack_builders.rs checks them as kpack does).
    let (secret, rest) = out.split_once("\n---\n").unwrap_or_else(|| panic!("{out}"));
    assert!(rest.contains("kind: ClusterStack"), "{rest}");
    for line in [
        "apiVersion: v1",
        "kind: Secret",
        "  name: \"airlock-bb-pull\"",
        "  namespace: \"builds\"",
        "type: kubernetes.io/dockerconfigjson",
    ] {
        assert!(secret.lines().any(|l| l == line), "{line:?} in {secret}");
    }
    let b64 = secret
        .lines()
        .find_map(|l| l.strip_prefix("  .dockerconfigjson: "))
        .unwrap();
    let config = json(&base64_decode(b64));
    let entry = &config["auths"][site.addr()];
    let creds = base64_decode(entry["auth"].as_str().unwrap());
    let (user, token) = creds.split_once(':').unwrap();
    assert_eq!(entry["username"], user);
    assert_eq!(entry["password"], token);
    assert!(user.starts_with("kpack-bb-builds-"), "{user}");

    // skopeo pulls the build and run images with it, once the server has
    // seen the new token user (at once on the filesystem; within its root
    // refresh on S3: another process made it).
    let manifest = |_: ()| site.curl(&["/v2/stacks/bb-build/manifests/1", "-u", &creds]);
    settled(b.refresh_bound(), &200, || manifest(()).0);
    let certs = site.cert_dir("certs", None);
    for (repo, tag) in [("stacks/bb-build:1", "build"), ("stacks/bb-run:1", "run")] {
        let pulled = site.dir.join(format!("pulled-{tag}"));
        skopeo(&[
            "copy",
            "--src-creds",
            &creds,
            "--src-cert-dir",
            certs.to_str().unwrap(),
            &format!("docker://{}/{repo}", site.addr()),
            &format!("oci:{}:{tag}", pulled.display()),
        ]);
        assert_eq!(
            layout_ref_digest(&pulled, tag),
            layout_ref_digest(&layout, tag)
        );
    }
    // ... and nothing else: another repository 403, a push 403.
    let (code, _, body) = site.curl(&["/v2/other/x/manifests/1", "-u", &creds]);
    assert_eq!(code, 403, "{body}");
    let (ok, err) = skopeo_status(&[
        "copy",
        "--dest-creds",
        &creds,
        "--dest-cert-dir",
        certs.to_str().unwrap(),
        &format!("oci:{}", l("latest")),
        &format!("docker://{}/stacks/bb-build:evil", site.addr()),
    ]);
    assert!(!ok, "the pull credential pushed");
    assert!(
        err.contains("403") || err.to_lowercase().contains("denied"),
        "{err}"
    );

    // Listed with the config's users; only its hash is stored.
    let list = site.airlock_ok(&[
        "user",
        "list",
        "--json",
        "--config",
        site.dir.join("airlock.toml").to_str().unwrap(),
    ]);
    let list = json(&list);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    for n in ["ops", "rd", "cell1", "stk", user] {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
    let mine = list
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == user)
        .unwrap();
    assert_eq!(mine["kind"], "token");
    assert_eq!(mine["roles"], serde_json::json!(["reader"]));
    assert_eq!(
        mine["repositories"],
        serde_json::json!(["stacks/bb-build", "stacks/bb-run"])
    );
    assert!(mine["created"].as_str().unwrap().ends_with('Z'), "{mine}");
    assert!(mine["by"].as_str().unwrap().contains('@'), "{mine}");
    let grep = Command::new("grep")
        .args(["-rqF", token])
        .arg(&site.data)
        .status()
        .unwrap();
    assert!(!grep.success(), "the token is stored in the data directory");

    // Revoked: 401 once the server sees the new root (at once on the
    // filesystem; within its root refresh on S3).
    site.airlock_ok(&["user", "revoke", user]);
    settled(b.refresh_bound(), &401, || manifest(()).0);
    let (code, heads, _) = manifest(());
    assert_eq!(code, 401);
    assert!(heads.contains("www-authenticate: basic"), "{heads}");
    let out = site.airlock(&["user", "revoke", user]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no token user"));
    let history = site.history();
    assert!(
        history
            .iter()
            .any(|g| g["reason"] == format!("revoke token user {user}")),
        "{history:#?}"
    );
}

#[test]
fn custom_stacks_policy_with_real_readers() {
    require_tool("skopeo", "skopeo");
    let users = format!(
        "[[user]]\nname = \"alice\"\n{pw}\nroles = [\"reader\"]\n\
         [[user]]\nname = \"bob\"\n{pw}\nroles = [\"reader\"]\n\
         [[user]]\nname = \"carol\"\n{pw}\nroles = [\"reader\"]\nrepositories = [\"other/\"]\n\
         [stacks]\nallow_admin = true\ncustom_stacks = \"on\"\n",
        pw = hash("pw"),
    );
    let site = site_with("", "", &users);
    let layout = fixture_layout();
    let register = |name: &str, creds: &str| {
        site.curl(&[
            &format!("/stacks/v1/{name}/register"),
            "-X",
            "POST",
            "-u",
            creds,
            "-H",
            "Content-Type: application/json",
            "--data",
            "{\"image\":\"stacks/bb:latest\"}",
        ])
    };
    let refused = |(code, _, body): (u16, String, String), policy: &str| {
        assert_eq!(code, 403, "{body}");
        assert!(
            body.contains(&format!("custom_stacks = \\\"{policy}\\\"")),
            "{body}"
        );
    };
    {
        let _server = site.start();
        site.push(
            &format!("oci:{}:latest", layout.display()),
            "stacks/bb:latest",
        );
        // on: a reader registers under their own name, not another's.
        let (code, _, body) = register("alice-foo", "alice:pw");
        assert_eq!(code, 200, "{body}");
        assert_eq!(json(&body)["custom"], true);
        refused(register("bob-foo", "alice:pw"), "on");
        refused(register("foo", "alice:pw"), "on");
        assert_eq!(register("bob-foo", "bob:pw").0, 200);
        // A reader limited to other/ may not name an image in stacks/.
        let (code, _, body) = register("carol-foo", "carol:pw");
        assert_eq!(code, 403, "{body}");
        assert!(
            body.contains("outside the repositories carol may access"),
            "{body}"
        );
        // Anonymous: 401 before any policy.
        assert_eq!(
            site.curl(&["/stacks/v1/x-foo/register", "-X", "POST"]).0,
            401
        );
    }
    let config = site.dir.join("airlock.toml");
    let set_policy = |from: &str, to: &str| {
        let text = std::fs::read_to_string(&config).unwrap();
        let (from, to) = (
            format!("custom_stacks = \"{from}\""),
            format!("custom_stacks = \"{to}\""),
        );
        std::fs::write(&config, text.replace(&from, &to)).unwrap();
    };
    set_policy("on", "admin-only");
    {
        let _server = site.start();
        // admin-only: readers are refused even under their own name; the admin may.
        refused(register("alice-bar", "alice:pw"), "admin-only");
        let (code, _, body) = register("site-bar", "ops:ops-pw");
        assert_eq!(code, 200, "{body}");
    }
    set_policy("admin-only", "off");
    let _server = site.start();
    refused(register("alice-baz", "alice:pw"), "off");
    refused(register("site-baz", "ops:ops-pw"), "off");
    // What was registered under the earlier modes stays.
    let out = airlock_ok(&["stack", "list", "--data", site.data.to_str().unwrap()]);
    for name in ["alice-foo", "bob-foo", "site-bar"] {
        assert!(out.contains(name), "{name} in {out}");
    }
}
