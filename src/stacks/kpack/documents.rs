//! The YAML documents `airlock stack kpack` prints: the kpack
//! `ClusterStack` (`kpack.io/v1alpha2`) naming a stack's build and run
//! images by digest and, on a site where anonymous reads are off, the
//! `Secret` (`kubernetes.io/dockerconfigjson`) holding a read-only token
//! and the `ServiceAccount` listing it, which the ClusterStack names in
//! `spec.serviceAccountRef`.
//!
//! kpack's ClusterStack reconciler reads the images with the credentials
//! of `serviceAccountRef` only: the Secrets the ServiceAccount lists under
//! `secrets:` (kpack `pkg/secret/fetcher.go`), matched by registry
//! (`auths` key `HOST[:PORT]`, kpack `pkg/dockercreds`); its
//! `imagePullSecrets` serve the Kubernetes keychain. Without the
//! reference it reads anonymously, so a site with users answers 401 and
//! the ClusterStack never becomes Ready.
//!
//! Everything is checked in [`Documents::new`], before the CLI creates a
//! token user: the names ([`super::names`]) and the references.

use super::super::StackError;
use super::super::table::{ImageRef, StackName, StackTable};
use super::names;

/// A YAML double-quoted scalar (JSON string syntax is valid YAML).
pub fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// The kpack documents of one stack's active promotion, checked.
#[derive(Debug, Clone)]
pub struct Documents {
    stack: StackName,
    promotion: String,
    /// The ClusterStack's name (RFC 1123 subdomain).
    pub name: String,
    /// The registry, `HOST[:PORT]`.
    pub registry: String,
    id: String,
    build: ImageRef,
    run: ImageRef,
}

impl Documents {
    /// The documents for `stack`'s active promotion, pulled from
    /// `registry`, named `name` (default: [`names::object_name`]); with
    /// `namespace`, also the names of its Secret and ServiceAccount there.
    ///
    /// Errors: [`StackError::NotFound`] (unknown stack, no promotion, a
    /// promotion without build and run images); [`StackError::Invalid`]
    /// (a name, namespace, registry or repository Kubernetes or kpack
    /// would refuse).
    pub fn new(
        table: &StackTable,
        stack: &StackName,
        registry: &str,
        name: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<Documents, StackError> {
        let registry = names::registry(registry)?;
        let found = table.get(stack)?;
        let p = found
            .active()
            .ok_or_else(|| StackError::NotFound(format!("stack {stack} has no promotion")))?;
        let (Some(build), Some(run), Some(id)) = (&p.build_image, &p.run_image, &found.stack_id)
        else {
            return Err(StackError::NotFound(format!(
                "stack {stack}: promotion {} has no build and run images for builders",
                p.id
            )));
        };
        for image in [build, run] {
            names::check_repository(image.repository.as_str())?;
        }
        let name = names::object_name(table, stack, name)?;
        let docs = Documents {
            stack: stack.clone(),
            promotion: format!("{} ({})", p.id, p.time),
            name,
            registry,
            id: id.clone(),
            build: build.clone(),
            run: run.clone(),
        };
        if let Some(ns) = namespace {
            names::check_namespace(ns)?;
            let secret = docs.credential_name();
            if !names::is_subdomain(&secret) {
                return Err(StackError::Invalid(format!(
                    "the Secret and ServiceAccount name {secret:?} would be over 253 characters: give a shorter --name"
                )));
            }
        }
        Ok(docs)
    }

    /// The repositories builders pull from (sorted, without duplicates):
    /// what the pull credential is limited to.
    pub fn repositories(&self) -> Vec<String> {
        let mut repos = vec![
            self.build.repository.to_string(),
            self.run.repository.to_string(),
        ];
        repos.sort();
        repos.dedup();
        repos
    }

    /// The name of the Secret and of the ServiceAccount: `airlock-<name>-pull`.
    pub fn credential_name(&self) -> String {
        format!("airlock-{}-pull", self.name)
    }

    /// The ClusterStack; with `namespace`, its `spec.serviceAccountRef`
    /// names [`Self::credential_name`] there, else a comment says what a
    /// site without anonymous reads needs.
    pub fn cluster_stack(&self, namespace: Option<&str>) -> String {
        let reference = match namespace {
            Some(ns) => format!(
                "  serviceAccountRef:\n    name: {}\n    namespace: {}\n",
                quote(&self.credential_name()),
                quote(ns)
            ),
            None => String::new(),
        };
        let anonymous = match namespace {
            Some(_) => "",
            None => {
                "# No serviceAccountRef: kpack reads these images anonymously. Where anonymous\n\
                 # reads are off (users configured), add --pull-secret --namespace NS for a\n\
                 # Secret and a ServiceAccount this ClusterStack names.\n"
            }
        };
        let renamed = match self.name == self.stack.as_str() {
            true => String::new(),
            false => format!(
                "# ClusterStack name {} (Kubernetes names are RFC 1123; see --name).\n",
                self.name
            ),
        };
        format!(
            "# kpack ClusterStack for airlock stack {}, promotion {}.\n\
             # kpack never polls: apply this after every promotion (kubectl apply -f -).\n\
             {renamed}{anonymous}\
             apiVersion: kpack.io/v1alpha2\n\
             kind: ClusterStack\n\
             metadata:\n  name: {}\n\
             spec:\n  id: {}\n  buildImage:\n    image: {}\n  runImage:\n    image: {}\n{reference}",
            self.stack,
            self.promotion,
            quote(&self.name),
            quote(&self.id),
            quote(&format!("{}/{}", self.registry, self.build)),
            quote(&format!("{}/{}", self.registry, self.run)),
        )
    }

    /// The Secret (`kubernetes.io/dockerconfigjson`, `.dockerconfigjson` =
    /// base64 of `{"auths":{"<registry>":{"username","password","auth"}}}`,
    /// `auth` = base64(`user:token`)) and the ServiceAccount listing it,
    /// both [`Self::credential_name`] in `namespace`, as two YAML documents.
    pub fn credential(&self, namespace: &str, user: &str, token: &str) -> String {
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let config = serde_json::json!({
            "auths": { &self.registry: {
                "username": user,
                "password": token,
                "auth": b64(&format!("{user}:{token}")),
            }}
        });
        let name = quote(&self.credential_name());
        let ns = quote(namespace);
        format!(
            "# Read-only pull credential for the build and run images of airlock stack {}\n\
             # (token user {user}; revoke with `airlock user revoke {user}`).\n\
             apiVersion: v1\n\
             kind: Secret\n\
             metadata:\n  name: {name}\n  namespace: {ns}\n  annotations:\n    airlock.io/user: {}\n\
             type: kubernetes.io/dockerconfigjson\n\
             data:\n  .dockerconfigjson: {}\n\
             ---\n\
             # The ServiceAccount the ClusterStack names: kpack reads its secrets.\n\
             apiVersion: v1\n\
             kind: ServiceAccount\n\
             metadata:\n  name: {name}\n  namespace: {ns}\n\
             secrets:\n- name: {name}\n\
             imagePullSecrets:\n- name: {name}\n",
            self.stack,
            quote(user),
            b64(&config.to_string()),
        )
    }
}
