//! The serve config: `airlock serve --config FILE` (TOML), overridden by
//! command-line flags and `AIRLOCK_*` variables.
//!
//! Owns: the schema ([`Settings`], one struct per TOML section), reading a
//! file (unknown keys are errors naming their path, e.g. `limits.max_conns`;
//! relative paths are resolved against the file's directory), merging the
//! command line over the file, checking the result, and turning it into
//! the server's parts ([`Resolved`]). Each setting is one field: one
//! `Option` field of a section struct is at once the TOML key (serde), the
//! flag and its `AIRLOCK_*` variable (clap) and the documentation; merging
//! is generic (the command line's set fields, as TOML, over the file's).
//! Defaults are applied where the value is used, in [`Settings::resolve`].

pub mod reload;
mod resolve;
mod sections;

use std::path::{Path, PathBuf};

pub use resolve::{Resolved, StoreTarget};
pub use sections::*;

/// Errors of reading or checking a config, each one line with its cause.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read config {path}: {cause}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// Not TOML, or not the schema (`key` is the path of the bad key).
    #[error("config {path}: {key}: {cause}")]
    Invalid {
        /// The file (`command line` for flags).
        path: String,
        /// The key path, e.g. `limits.max_connections` or `user[0].roles`.
        key: String,
        /// What is wrong.
        cause: String,
    },
    /// A setting's value is not acceptable.
    #[error("{key}: {cause}")]
    Value {
        /// The key path.
        key: String,
        /// What is wrong.
        cause: String,
    },
}

impl ConfigError {
    /// A bad value of `key`.
    pub fn value(key: &str, cause: impl std::fmt::Display) -> ConfigError {
        ConfigError::Value {
            key: key.into(),
            cause: cause.to_string(),
        }
    }
}

/// Parses a config file's text. `origin` names it in errors.
///
/// Errors: [`ConfigError::Invalid`] with the key path (`-` for a syntax
/// error, whose cause gives line and column).
pub fn parse(text: &str, origin: &str) -> Result<Settings, ConfigError> {
    let value: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Invalid {
            path: origin.into(),
            key: "-".into(),
            cause: one_line(&e.to_string()),
        })?;
    from_value(toml::Value::Table(value), origin)
}

fn from_value(value: toml::Value, origin: &str) -> Result<Settings, ConfigError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let key = e.path().to_string();
        ConfigError::Invalid {
            path: origin.into(),
            key: if key.is_empty() || key == "." {
                "-".into()
            } else {
                key
            },
            cause: one_line(&e.into_inner().to_string()),
        }
    })
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Reads `path` (relative paths inside resolved against its directory).
///
/// Errors: as [`parse`], or the file cannot be read.
pub fn load(path: &Path) -> Result<Settings, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
        path: path.to_path_buf(),
        cause,
    })?;
    let mut s = parse(&text, &path.display().to_string())?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    s.resolve_paths(dir);
    Ok(s)
}

/// `over`'s set values over `base` (tables merged key by key; any other
/// value, arrays included, replaced).
pub fn merge(base: Settings, over: &Settings) -> Result<Settings, ConfigError> {
    let to_value = |s: &Settings| toml::Value::try_from(s).map_err(|e| ConfigError::value("-", e));
    let mut merged = to_value(&base)?;
    merge_value(&mut merged, to_value(over)?);
    let mut out = from_value(merged, "command line")?;
    // Flags-only settings never come from a file.
    out.torcx.key_flags.clone_from(&over.torcx.key_flags);
    Ok(out)
}

fn merge_value(base: &mut toml::Value, over: toml::Value) {
    match (base, over) {
        (toml::Value::Table(b), toml::Value::Table(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge_value(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

#[cfg(test)]
mod tests;
