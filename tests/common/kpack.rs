//! The documents `airlock stack kpack` prints, read as Kubernetes and kpack
//! read them, written from their sources (not from airlock's code):
//! - the YAML stream is parsed by Ruby's Psych (`YAML.load_stream`);
//! - the API server: known fields only (`kubectl apply --validate=strict`),
//!   RFC 1123 subdomain names (`IsDNS1123Subdomain`), RFC 1123 label
//!   namespaces, a `kubernetes.io/dockerconfigjson` Secret holding exactly
//!   `.dockerconfigjson`, valid base64 of a JSON object;
//! - kpack's ClusterStack webhook (`cluster_stack_validation.go`): `id`
//!   set, both images parsed by go-containerregistry's
//!   `name.ParseReference` (here: by digest only), `serviceAccountRef` with
//!   `name` and `namespace` when present;
//! - kpack's credentials (`k8sdockercreds`, `secret/fetcher.go`,
//!   `dockercreds/match.go`): the ServiceAccount named by
//!   `serviceAccountRef`, the Secrets it lists under `secrets:` (each must
//!   exist in its namespace), the `auths` entry whose key matches the
//!   image's registry (`HOST`, `https://HOST`, `http://HOST`, with `/v1/`
//!   or `/v2/`), its `auth` (base64 `user:password`) before
//!   `username`/`password`; no match reads anonymously.

use serde_json::Value;

/// An image kpack reads for the ClusterStack, and with what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pull {
    /// `buildImage` or `runImage`.
    pub field: String,
    /// The registry as go-containerregistry reads it.
    pub registry: String,
    pub repository: String,
    pub digest: String,
    /// `(user, password)`, or `None` for anonymous.
    pub credentials: Option<(String, String)>,
}

/// The YAML stream `text` as JSON documents, parsed by Ruby's Psych.
pub fn yaml_stream(text: &str) -> Vec<Value> {
    super::require_tool("ruby", "ruby");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("docs.yml");
    std::fs::write(&f, text).unwrap();
    let o = std::process::Command::new("ruby")
        .args([
            "-ryaml",
            "-rjson",
            "-e",
            "puts JSON.generate(YAML.load_stream(File.read(ARGV[0])).compact)",
        ])
        .arg(&f)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "YAML: {}\n{text}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice::<Vec<Value>>(&o.stdout).unwrap()
}

fn is_label(s: &str, max: usize) -> bool {
    let b = s.as_bytes();
    let an = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= max
        && an(&b[0])
        && an(&b[b.len() - 1])
        && b.iter().all(|c| an(c) || *c == b'-')
}

/// `IsDNS1123Subdomain`.
pub fn is_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(|l| is_label(l, 63))
}

fn keys_within(v: &Value, allowed: &[&str], path: &str) -> Result<(), String> {
    let o = v
        .as_object()
        .ok_or_else(|| format!("{path}: not a mapping"))?;
    match o.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(format!("{path}: unknown field {k:?} (strict decoding)")),
        None => Ok(()),
    }
}

fn string<'a>(v: &'a Value, path: &str) -> Result<&'a str, String> {
    v.as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{path}: missing or not a string"))
}

/// go-containerregistry's `name.NewDigest`: `(registry, repository,
/// digest)`; the registry is the first part when it holds `.` or `:`
/// (else Docker Hub), an RFC 3986 authority; the repository 2 to 255 of
/// `[a-z0-9_./-]`.
pub fn parse_reference(r: &str) -> Result<(String, String, String), String> {
    let (base, digest) = r
        .split_once('@')
        .ok_or_else(|| format!("{r}: not a digest reference"))?;
    let hex = digest
        .strip_prefix("sha256:")
        .ok_or_else(|| format!("{r}: digest is not sha256"))?;
    if hex.len() != 64
        || !hex
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    {
        return Err(format!("{r}: bad digest"));
    }
    let (registry, repo) = match base.split_once('/') {
        Some((reg, repo)) if reg.contains('.') || reg.contains(':') => (reg.to_string(), repo),
        _ => ("index.docker.io".to_string(), base),
    };
    // Go's url.Parse("//" + registry).Host == registry: no userinfo, path,
    // query or space; a port (after the last ':' or after ']') of digits.
    let port = match registry.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map(|(_, after)| after),
        None => Some(registry.rfind(':').map_or("", |i| &registry[i..])),
    };
    let authority_ok = !registry.is_empty()
        && !registry
            .bytes()
            .any(|c| c.is_ascii_whitespace() || b"/?#@%".contains(&c))
        && port.is_some_and(|p| {
            p.is_empty()
                || p.strip_prefix(':')
                    .is_some_and(|d| d.bytes().all(|c| c.is_ascii_digit()))
        });
    if !authority_ok {
        return Err(format!(
            "{r}: registry {registry:?} is not an RFC 3986 authority"
        ));
    }
    let repo_ok = (2..=255).contains(&repo.len())
        && repo
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-./".contains(&c));
    if !repo_ok {
        return Err(format!("{r}: repository {repo:?} is refused"));
    }
    Ok((registry, repo.to_string(), digest.to_string()))
}

/// `text` decoded by coreutils' `base64 -d` (an independent decoder).
pub fn base64(text: &str) -> Result<Vec<u8>, String> {
    let o = std::process::Command::new("sh")
        .args(["-c", "printf %s \"$1\" | base64 -d", "sh", text])
        .output()
        .unwrap();
    if !o.status.success() {
        return Err(format!("not base64: {text:?}"));
    }
    Ok(o.stdout)
}

/// Checks every document of the stream `text` as the API server and kpack
/// would; returns the ClusterStack's two images with the credentials kpack
/// reads them with. Errors: the first rule broken.
pub fn validate(text: &str) -> Result<Vec<Pull>, String> {
    let docs = yaml_stream(text);
    let mut stacks = Vec::new();
    let mut secrets = Vec::new();
    let mut accounts = Vec::new();
    for (i, d) in docs.iter().enumerate() {
        let kind = (
            d["apiVersion"].as_str().unwrap_or(""),
            d["kind"].as_str().unwrap_or(""),
        );
        let at = format!("document {i} ({})", kind.1);
        let meta = &d["metadata"];
        keys_within(
            meta,
            &["name", "namespace", "annotations", "labels"],
            &format!("{at}.metadata"),
        )?;
        let name = string(&meta["name"], &format!("{at}.metadata.name"))?;
        if !is_subdomain(name) {
            return Err(format!(
                "{at}: metadata.name {name:?} is not an RFC 1123 subdomain"
            ));
        }
        for (k, v) in meta["annotations"].as_object().into_iter().flatten() {
            if !v.is_string() {
                return Err(format!("{at}: annotation {k} is not a string"));
            }
        }
        let namespaced = |d: &Value| -> Result<String, String> {
            let ns = string(
                &d["metadata"]["namespace"],
                &format!("{at}.metadata.namespace"),
            )?;
            if !is_label(ns, 63) {
                return Err(format!("{at}: namespace {ns:?} is not an RFC 1123 label"));
            }
            Ok(ns.to_string())
        };
        match kind {
            ("kpack.io/v1alpha2", "ClusterStack") => {
                keys_within(d, &["apiVersion", "kind", "metadata", "spec"], &at)?;
                if !meta["namespace"].is_null() {
                    return Err(format!("{at}: a ClusterStack is cluster-scoped"));
                }
                let spec = &d["spec"];
                keys_within(
                    spec,
                    &["id", "buildImage", "runImage", "serviceAccountRef"],
                    &format!("{at}.spec"),
                )?;
                string(&spec["id"], &format!("{at}.spec.id"))?;
                for f in ["buildImage", "runImage"] {
                    keys_within(&spec[f], &["image"], &format!("{at}.spec.{f}"))?;
                    parse_reference(string(&spec[f]["image"], &format!("{at}.spec.{f}.image"))?)?;
                }
                let sa = &spec["serviceAccountRef"];
                if !sa.is_null() {
                    keys_within(
                        sa,
                        &["name", "namespace", "kind", "apiVersion"],
                        &format!("{at}.spec.serviceAccountRef"),
                    )?;
                    string(&sa["name"], "spec.serviceAccountRef.name")?;
                    string(&sa["namespace"], "spec.serviceAccountRef.namespace")?;
                }
                stacks.push(d.clone());
            }
            ("v1", "Secret") => {
                keys_within(d, &["apiVersion", "kind", "metadata", "type", "data"], &at)?;
                let ns = namespaced(d)?;
                if d["type"] != "kubernetes.io/dockerconfigjson" {
                    return Err(format!(
                        "{at}: type {} is not kubernetes.io/dockerconfigjson",
                        d["type"]
                    ));
                }
                keys_within(&d["data"], &[".dockerconfigjson"], &format!("{at}.data"))?;
                let raw = base64(string(
                    &d["data"][".dockerconfigjson"],
                    &format!("{at}.data[.dockerconfigjson]"),
                )?)?;
                let config: Value = serde_json::from_slice(&raw)
                    .map_err(|e| format!("{at}: .dockerconfigjson is not JSON: {e}"))?;
                if !config.is_object() {
                    return Err(format!("{at}: .dockerconfigjson is not a JSON object"));
                }
                secrets.push((ns, name.to_string(), config));
            }
            ("v1", "ServiceAccount") => {
                keys_within(
                    d,
                    &[
                        "apiVersion",
                        "kind",
                        "metadata",
                        "secrets",
                        "imagePullSecrets",
                    ],
                    &at,
                )?;
                let ns = namespaced(d)?;
                let mut listed = Vec::new();
                for list in ["secrets", "imagePullSecrets"] {
                    for s in d[list].as_array().into_iter().flatten() {
                        keys_within(s, &["name"], &format!("{at}.{list}[]"))?;
                        let n = string(&s["name"], &format!("{at}.{list}[].name"))?;
                        if list == "secrets" {
                            listed.push(n.to_string());
                        }
                    }
                }
                accounts.push((ns, name.to_string(), listed));
            }
            other => return Err(format!("{at}: unexpected {other:?}")),
        }
    }
    let [stack] = &stacks[..] else {
        return Err(format!("{} ClusterStacks, not one", stacks.len()));
    };
    let spec = &stack["spec"];
    let sa = &spec["serviceAccountRef"];
    // The Secrets kpack reads: those the ServiceAccount lists (each must exist).
    let mut configs = Vec::new();
    if !sa.is_null() {
        let (ns, name) = (
            sa["namespace"].as_str().unwrap(),
            sa["name"].as_str().unwrap(),
        );
        let (_, _, listed) = accounts
            .iter()
            .find(|(n, a, _)| n == ns && a == name)
            .ok_or_else(|| format!("serviceAccountRef {ns}/{name}: no such ServiceAccount"))?;
        for s in listed {
            let (_, _, config) = secrets
                .iter()
                .find(|(n, m, _)| n == ns && m == s)
                .ok_or_else(|| {
                    format!("ServiceAccount {ns}/{name} lists Secret {s}, which does not exist")
                })?;
            configs.push(config);
        }
    }
    let mut pulls = Vec::new();
    for f in ["buildImage", "runImage"] {
        let (registry, repository, digest) = parse_reference(spec[f]["image"].as_str().unwrap())?;
        let matches = |key: &str| {
            [
                "{}",
                "https://{}",
                "http://{}",
                "https://{}/v1/",
                "http://{}/v1/",
                "https://{}/v2/",
                "http://{}/v2/",
            ]
            .iter()
            .any(|fmt| fmt.replace("{}", &registry) == key)
        };
        let mut credentials = None;
        for config in &configs {
            for (key, entry) in config["auths"].as_object().into_iter().flatten() {
                if credentials.is_some() || !matches(key) {
                    continue;
                }
                credentials = Some(match entry["auth"].as_str().filter(|a| !a.is_empty()) {
                    Some(auth) => {
                        let plain = String::from_utf8(base64(auth)?).map_err(|e| e.to_string())?;
                        let (u, p) = plain
                            .split_once(':')
                            .ok_or("auth is not base64 of user:password")?;
                        (u.to_string(), p.to_string())
                    }
                    None => (
                        string(&entry["username"], "username")?.to_string(),
                        entry["password"].as_str().unwrap_or("").to_string(),
                    ),
                });
            }
        }
        pulls.push(Pull {
            field: f.to_string(),
            registry,
            repository,
            digest,
            credentials,
        });
    }
    Ok(pulls)
}
