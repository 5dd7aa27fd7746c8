//! Builders: what kpack requires of a stack's build and run images, and the
//! kpack `ClusterStack` (`kpack.io/v1alpha2`) pointing at airlock by digest.
//!
//! Owns: the checks kpack's `RemoteStackReader` makes, so that a promotion
//! kpack would reject is refused up front with the reason: both images
//! carry the label `io.buildpacks.stack.id`, equal to the stack id; the
//! build image's environment has integer `CNB_USER_ID` and `CNB_GROUP_ID`.
//! kpack never polls: whoever promotes prints and applies the new
//! ClusterStack (a run-image-only change is a cheap rebase).

use super::StackError;
use super::image::{PlatformImage, env, labels};
use super::table::{ImageRef, Promotion, StackName, StackTable};

/// The label naming a Cloud Native Buildpacks stack.
pub const STACK_ID_LABEL: &str = "io.buildpacks.stack.id";

/// Checks build and run images (every platform of each) as kpack does;
/// returns the stack id. `expected`: the id they must carry (default: the
/// build image's label). Errors: every reason kpack would refuse, joined.
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
            let what = format!("{role} image {} ({})", img.manifest, img.platform);
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
    match (reasons.is_empty(), id) {
        (true, Some(id)) => Ok(id),
        (true, None) => Err(format!(
            "no stack id: the build image lacks {STACK_ID_LABEL}"
        )),
        (false, _) => Err(reasons.join("; ")),
    }
}

/// A YAML double-quoted scalar (JSON string syntax is valid YAML).
pub fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// The active promotion of `name` with its build image, run image and
/// stack id. Errors: unknown stack, no promotion, or a promotion without
/// build and run images.
fn builder_images<'a>(
    table: &'a StackTable,
    name: &StackName,
) -> Result<(&'a Promotion, &'a ImageRef, &'a ImageRef, &'a str), StackError> {
    let stack = table.get(name)?;
    let p = stack
        .active()
        .ok_or_else(|| StackError::NotFound(format!("stack {name} has no promotion")))?;
    let (Some(build), Some(run), Some(id)) = (&p.build_image, &p.run_image, &stack.stack_id) else {
        return Err(StackError::NotFound(format!(
            "stack {name}: promotion {} has no build and run images for builders",
            p.id
        )));
    };
    Ok((p, build, run, id))
}

/// The repositories builders pull `name`'s build and run images from
/// (sorted, without duplicates): what its pull credential is limited to.
///
/// Errors: as [`cluster_stack`].
pub fn builder_repositories(
    table: &StackTable,
    name: &StackName,
) -> Result<Vec<String>, StackError> {
    let (_, build, run, _) = builder_images(table, name)?;
    let mut repos = vec![build.repository.to_string(), run.repository.to_string()];
    repos.sort();
    repos.dedup();
    Ok(repos)
}

/// A `kubernetes.io/dockerconfigjson` Secret named `airlock-<stack>-pull`
/// in `namespace`, whose `.dockerconfigjson` (base64) is
/// `{"auths":{"<registry>":{"username","password","auth"}}}` with `auth` =
/// base64(`user:token`), the form docker, containerd and kpack read.
pub fn pull_secret(
    name: &StackName,
    namespace: &str,
    registry: &str,
    user: &str,
    token: &str,
) -> String {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let registry = registry.trim_end_matches('/');
    let config = serde_json::json!({
        "auths": { registry: {
            "username": user,
            "password": token,
            "auth": b64(&format!("{user}:{token}")),
        }}
    });
    format!(
        "# Read-only pull credential for the build and run images of airlock stack {name}\n\
         # (token user {user}; revoke with `airlock user revoke {user}`).\n\
         apiVersion: v1\n\
         kind: Secret\n\
         metadata:\n  name: {}\n  namespace: {}\n  annotations:\n    airlock.io/user: {}\n\
         type: kubernetes.io/dockerconfigjson\n\
         data:\n  .dockerconfigjson: {}\n",
        quote(&format!("airlock-{name}-pull")),
        quote(namespace),
        quote(user),
        b64(&config.to_string()),
    )
}

/// The kpack ClusterStack for `name`'s active promotion, pointing at
/// `registry` (`HOST[:PORT]`) by digest.
///
/// Errors: unknown stack, no promotion, or a promotion without build and
/// run images.
pub fn cluster_stack(
    table: &StackTable,
    name: &StackName,
    registry: &str,
) -> Result<String, StackError> {
    let (p, build, run, id) = builder_images(table, name)?;
    let registry = registry.trim_end_matches('/');
    Ok(format!(
        "# kpack ClusterStack for airlock stack {name}, promotion {} ({}).\n\
         # kpack never polls: apply this after every promotion (kubectl apply -f -).\n\
         apiVersion: kpack.io/v1alpha2\n\
         kind: ClusterStack\n\
         metadata:\n  name: {}\n\
         spec:\n  id: {}\n  buildImage:\n    image: {}\n  runImage:\n    image: {}\n",
        p.id,
        p.time,
        quote(name.as_str()),
        quote(id),
        quote(&format!("{registry}/{build}")),
        quote(&format!("{registry}/{run}")),
    ))
}
