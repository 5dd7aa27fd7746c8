//! [`StackName`], Cloud Controller's [`StackState`] (RFC-0045) and [`ImageRef`]: the
//! validated strings of the stack table, (de)serialised as plain strings.

use super::*;

/// A stack name, such as `cflinuxfs4`: 1 to 128 characters of `[a-z0-9._-]`,
/// starting and ending with a letter or digit (it appears in URLs, object
/// keys and rep's `NAME:/path` properties).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct StackName(String);

impl StackName {
    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for StackName {
    type Err = StackError;
    fn from_str(s: &str) -> Result<Self, StackError> {
        let b = s.as_bytes();
        let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        let ok = !b.is_empty()
            && b.len() <= 128
            && alnum(b[0])
            && alnum(b[b.len() - 1])
            && b.iter()
                .all(|&c| alnum(c) || matches!(c, b'.' | b'_' | b'-'));
        if ok {
            Ok(StackName(s.to_string()))
        } else {
            Err(StackError::Invalid(format!(
                "invalid stack name {s:?}: 1 to 128 characters of [a-z0-9._-], starting and ending with a letter or digit"
            )))
        }
    }
}

impl TryFrom<String> for StackName {
    type Error = StackError;
    fn try_from(s: String) -> Result<Self, StackError> {
        s.parse()
    }
}

impl From<StackName> for String {
    fn from(n: StackName) -> String {
        n.0
    }
}

impl fmt::Display for StackName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for StackName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Cloud Controller's stack states (v3 API, RFC-0045).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum StackState {
    /// Staging and running work.
    #[default]
    Active,
    /// Staging works, with a warning.
    Deprecated,
    /// No new apps; restaging existing ones works (with a warning).
    Restricted,
    /// No staging at all; running apps keep running.
    Disabled,
}

impl StackState {
    /// The upper-case name Cloud Controller uses.
    pub fn as_str(self) -> &'static str {
        match self {
            StackState::Active => "ACTIVE",
            StackState::Deprecated => "DEPRECATED",
            StackState::Restricted => "RESTRICTED",
            StackState::Disabled => "DISABLED",
        }
    }

    /// What the state means, in Cloud Controller's terms.
    pub fn meaning(self) -> &'static str {
        match self {
            StackState::Active => "staging and running work",
            StackState::Deprecated => "staging works with a warning; it will be removed",
            StackState::Restricted => "no new apps; restaging existing apps works with a warning",
            StackState::Disabled => "no staging at all; running apps keep running",
        }
    }

    /// The warning cells and clients get for this state, `None` for ACTIVE,
    /// in Cloud Controller's words: its staging warning for DEPRECATED and
    /// RESTRICTED (restaging still works), its staging refusal for DISABLED.
    pub fn warning(self, name: &StackName, reason: &str) -> Option<String> {
        let tail = if reason.is_empty() {
            String::new()
        } else {
            format!(" {reason}")
        };
        let state = self.as_str();
        match self {
            StackState::Active => None,
            StackState::Deprecated | StackState::Restricted => Some(format!(
                "The stack '{name}' is '{state}' and will be removed in the future.{tail}"
            )),
            StackState::Disabled => Some(format!(
                "The stack '{name}' is '{state}' and cannot be used for staging.{tail}"
            )),
        }
    }
}

impl FromStr for StackState {
    type Err = StackError;
    fn from_str(s: &str) -> Result<Self, StackError> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "ACTIVE" => StackState::Active,
            "DEPRECATED" => StackState::Deprecated,
            "RESTRICTED" => StackState::Restricted,
            "DISABLED" => StackState::Disabled,
            _ => {
                return Err(StackError::Invalid(format!(
                    "invalid state {s:?}: ACTIVE, DEPRECATED, RESTRICTED or DISABLED"
                )));
            }
        })
    }
}

/// An image pinned by digest: `repository@digest`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ImageRef {
    /// The repository.
    pub repository: RepositoryName,
    /// The root manifest or index digest.
    pub digest: Digest,
}

impl FromStr for ImageRef {
    type Err = StackError;
    fn from_str(s: &str) -> Result<Self, StackError> {
        let bad =
            || StackError::Invalid(format!("invalid image reference {s:?}: REPOSITORY@DIGEST"));
        let (repo, digest) = s.split_once('@').ok_or_else(bad)?;
        Ok(ImageRef {
            repository: repo.parse().map_err(|_| bad())?,
            digest: digest.parse().map_err(|_| bad())?,
        })
    }
}

impl TryFrom<String> for ImageRef {
    type Error = StackError;
    fn try_from(s: String) -> Result<Self, StackError> {
        s.parse()
    }
}

impl From<ImageRef> for String {
    fn from(r: ImageRef) -> String {
        r.to_string()
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.repository, self.digest)
    }
}

impl fmt::Debug for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
