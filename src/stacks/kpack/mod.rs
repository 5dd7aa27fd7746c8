//! Builders: what kpack requires of a stack's build and run images, and the
//! documents (`ClusterStack`, `ServiceAccount`, `Secret`) that let kpack
//! read them from airlock by digest.
//!
//! Owns: the checks kpack's `RemoteStackReader` makes (kpack
//! `pkg/cnb/remote_stack_reader.go`), so that a promotion kpack would
//! reject is refused up front with kpack's reason:
//! - both images carry the label `io.buildpacks.stack.id`, equal to the
//!   stack id;
//! - the build image's environment has integer `CNB_USER_ID` and
//!   `CNB_GROUP_ID`;
//! - the label `io.buildpacks.stack.mixins`, where present, is a JSON array
//!   of strings; the build image has no `run:` mixin, the run image no
//!   `build:` mixin, and every mixin of the build image without a stage
//!   prefix is on the run image.
//!
//! kpack never polls: whoever promotes prints and applies the new
//! ClusterStack (a run-image-only change is a cheap rebase).
//!
//! - [`names`]: Kubernetes object names, namespaces and the registry host
//!   as kpack and the API server read them.
//! - [`documents`]: the printed YAML documents.

pub mod documents;
pub mod names;

pub use documents::{Documents, quote};

use super::image::{PlatformImage, env, labels};

/// The label naming a Cloud Native Buildpacks stack.
pub const STACK_ID_LABEL: &str = "io.buildpacks.stack.id";

/// The label listing a stack image's mixins (a JSON array of strings).
pub const MIXINS_LABEL: &str = "io.buildpacks.stack.mixins";

/// Checks build and run images (every platform of each) as kpack does;
/// returns the stack id. `expected`: the id they must carry (default: the
/// build image's label). Mixins are compared between the build and run
/// image of the same platform (or the only run image).
///
/// Errors: every reason kpack would refuse, joined with `; `; kpack's own
/// sentence for the mixin rules (`runImage missing required mixin(s):
/// curl`, `build image contains run-only mixin(s): run:tzdata`), followed
/// by the image and platform in parentheses.
pub fn check(
    expected: Option<&str>,
    build: &[PlatformImage],
    run: &[PlatformImage],
) -> Result<String, String> {
    let mut reasons = Vec::new();
    let id = expected.map(str::to_string).or_else(|| {
        build
            .first()
            .and_then(|b| labels(&b.config).get(STACK_ID_LABEL).cloned())
    });
    for (role, images) in [("build", build), ("run", run)] {
        for img in images {
            let what = describe(role, img);
            match (labels(&img.config).get(STACK_ID_LABEL), &id) {
                (None, _) => reasons.push(format!("{what} lacks the label {STACK_ID_LABEL}")),
                (Some(have), Some(want)) if have != want => reasons.push(format!(
                    "{what} has {STACK_ID_LABEL}={have:?}, the stack id is {want:?}"
                )),
                _ => {}
            }
            if role == "build" {
                for var in ["CNB_USER_ID", "CNB_GROUP_ID"] {
                    match env(&img.config, var) {
                        None => {
                            reasons.push(format!("{what} lacks the environment variable {var}"))
                        }
                        Some(v) if v.parse::<u32>().is_err() => {
                            reasons.push(format!("{what} has {var}={v:?}, not an integer"))
                        }
                        Some(_) => {}
                    }
                }
            }
        }
    }
    reasons.extend(check_mixins(build, run));
    match (reasons.is_empty(), id) {
        (true, Some(id)) => Ok(id),
        (true, None) => Err(format!(
            "no stack id: the build image lacks {STACK_ID_LABEL}"
        )),
        (false, _) => Err(reasons.join("; ")),
    }
}

/// `build image REPO@DIGEST (PLATFORM)`, naming an image in a reason.
fn describe(role: &str, img: &PlatformImage) -> String {
    format!("{role} image {} ({})", img.manifest, img.platform)
}

/// The image's mixins: `Ok(empty)` without the label. Errors: the label is
/// not a JSON array of strings (kpack fails to decode it).
fn mixins(img: &PlatformImage) -> Result<Vec<String>, String> {
    match labels(&img.config).get(MIXINS_LABEL) {
        None => Ok(Vec::new()),
        Some(text) => serde_json::from_str::<Option<Vec<String>>>(text)
            .map(Option::unwrap_or_default)
            .map_err(|e| format!("label {MIXINS_LABEL} is not a JSON array of strings: {e}")),
    }
}

/// kpack's mixin rules (`mixins` in its `remote_stack_reader.go`) for each
/// build platform and its run image; one reason per broken rule.
fn check_mixins(build: &[PlatformImage], run: &[PlatformImage]) -> Vec<String> {
    let mut reasons = Vec::new();
    let mut read = |role: &str, img: &PlatformImage| {
        mixins(img).unwrap_or_else(|e| {
            reasons.push(format!("{} {e}", describe(role, img)));
            Vec::new()
        })
    };
    let decoded: Vec<(&PlatformImage, Vec<String>)> =
        build.iter().map(|b| (b, read("build", b))).collect();
    let run_decoded: Vec<(&PlatformImage, Vec<String>)> =
        run.iter().map(|r| (r, read("run", r))).collect();
    for (r, mixins) in &run_decoded {
        let invalid: Vec<&str> = staged(mixins, "build:");
        if !invalid.is_empty() {
            reasons.push(format!(
                "run image contains build-only mixin(s): {} ({})",
                invalid.join(", "),
                describe("run", r)
            ));
        }
    }
    for (b, mixins) in &decoded {
        let invalid = staged(mixins, "run:");
        if !invalid.is_empty() {
            reasons.push(format!(
                "build image contains run-only mixin(s): {} ({})",
                invalid.join(", "),
                describe("build", b)
            ));
        }
        let paired = run_decoded
            .iter()
            .find(|(r, _)| r.platform == b.platform)
            .or(match &run_decoded[..] {
                [only] => Some(only),
                _ => None,
            });
        let Some((r, run_mixins)) = paired else {
            continue;
        };
        let missing: Vec<&str> = common(mixins)
            .filter(|m| !common(run_mixins).any(|have| have == *m))
            .collect();
        if !missing.is_empty() {
            reasons.push(format!(
                "runImage missing required mixin(s): {} ({} needs them on {})",
                missing.join(", "),
                describe("build", b),
                describe("run", r)
            ));
        }
    }
    reasons
}

/// The mixins of `mixins` with the stage prefix `prefix` (`run:`, `build:`), in order.
fn staged<'a>(mixins: &'a [String], prefix: &str) -> Vec<&'a str> {
    mixins
        .iter()
        .filter(|m| m.starts_with(prefix))
        .map(String::as_str)
        .collect()
}

/// The mixins of `mixins` without a stage prefix, in order.
fn common(mixins: &[String]) -> impl Iterator<Item = &str> {
    mixins
        .iter()
        .filter(|m| !m.starts_with("build:") && !m.starts_with("run:"))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(platform: &str, labels: &[(&str, &str)], env: &[&str]) -> PlatformImage {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        PlatformImage {
            platform: platform.into(),
            manifest: crate::digest::Digest::sha256_of(platform.as_bytes()),
            layers: Vec::new(),
            config: serde_json::json!({"config": {"Labels": labels, "Env": env}}),
        }
    }

    fn pair(build_mixins: &str, run_mixins: &str) -> Result<String, String> {
        let id = (STACK_ID_LABEL, "io.test");
        let build = image(
            "linux/amd64",
            &[id, (MIXINS_LABEL, build_mixins)],
            &["CNB_USER_ID=1000", "CNB_GROUP_ID=1000"],
        );
        let run = image("linux/amd64", &[id, (MIXINS_LABEL, run_mixins)], &[]);
        check(None, &[build], &[run])
    }

    /// kpack's own cases (`remote_stack_reader_test.go`, pack's
    /// `ValidateMixins` tests): stage-specific mixins are ignored, extra run
    /// mixins are fine, missing ones and wrong stages are refused in order.
    #[test]
    fn mixins_follow_kpack() {
        assert_eq!(
            pair(r#"["mixinA","build:mixinB"]"#, r#"["mixinA","run:mixinC"]"#),
            Ok("io.test".into())
        );
        assert_eq!(pair(r#"["a"]"#, r#"["a","b"]"#), Ok("io.test".into()));
        assert_eq!(pair("null", "[]"), Ok("io.test".into()));
        let e = pair(r#"["curl","git","build:gcc"]"#, r#"["git"]"#).unwrap_err();
        assert!(
            e.starts_with("runImage missing required mixin(s): curl ("),
            "{e}"
        );
        let e = pair(r#"["run:tzdata","run:b"]"#, "[]").unwrap_err();
        assert!(
            e.starts_with("build image contains run-only mixin(s): run:tzdata, run:b ("),
            "{e}"
        );
        let e = pair("[]", r#"["build:gcc"]"#).unwrap_err();
        assert!(
            e.starts_with("run image contains build-only mixin(s): build:gcc ("),
            "{e}"
        );
        for bad in ["curl", r#""curl""#, r#"{"a":1}"#, "[1]", ""] {
            let e = pair(bad, "[]").unwrap_err();
            assert!(
                e.contains("label io.buildpacks.stack.mixins is not a JSON array of strings"),
                "{bad}: {e}"
            );
        }
    }
}
