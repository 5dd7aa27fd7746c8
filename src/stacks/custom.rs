//! Custom stacks (RFC-0040 "bring your own stack"): a named stack entry that
//! points at any image digest held in the store, registered by an admin or,
//! when the policy allows, by a user under their own name prefix.
//!
//! A custom stack is never the default stack and is never rolled out to
//! cells by promotion: it lives in its own map of the stack table
//! ([`StackTable::custom`]), beside the system stacks, and shares their
//! name space (one name is a system stack or a custom stack, never both).
//!
//! Owns: the policy switch (`custom_stacks = "off" | "admin-only" | "on"`),
//! who may register what, and the table change. The caller says who is
//! asking ([`Actor`]); the CLI is an admin (it holds the data directory).

use std::fmt;
use std::str::FromStr;

use super::StackError;
use super::table::{ImageRef, StackName, StackTable};

/// One custom stack.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CustomStack {
    /// The image, pinned by digest.
    pub image: ImageRef,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Who registered it (the user name, or `user@host` on the CLI).
    pub owner: String,
    /// When, RFC 3339 UTC.
    pub time: String,
}

/// Who may register custom stacks (config `custom_stacks`, default `off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CustomPolicy {
    /// Nobody.
    #[default]
    Off,
    /// Admins only.
    AdminOnly,
    /// Admins under any name; other users (the `reader` role and up) under
    /// their own name prefix `<user>-`.
    On,
}

impl CustomPolicy {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CustomPolicy::Off => "off",
            CustomPolicy::AdminOnly => "admin-only",
            CustomPolicy::On => "on",
        }
    }
}

impl fmt::Display for CustomPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CustomPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(CustomPolicy::Off),
            "admin-only" => Ok(CustomPolicy::AdminOnly),
            "on" => Ok(CustomPolicy::On),
            _ => Err(format!(
                "invalid custom_stacks policy {s:?}: off, admin-only or on"
            )),
        }
    }
}

/// Who asks to register a custom stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The user name (`user@host` on the CLI).
    pub name: String,
    /// True for the `admin` role (and the CLI).
    pub admin: bool,
    /// True when the user may pull at all (`reader`, `cell` or `admin`).
    pub reader: bool,
}

/// Checks that `actor` may register a custom stack called `name` under
/// `policy`. Errors: [`StackError::Denied`] naming the policy that refused.
pub fn authorize(policy: CustomPolicy, actor: &Actor, name: &StackName) -> Result<(), StackError> {
    let denied = |why: String| {
        StackError::Denied(format!(
            "custom stack {name} refused by policy custom_stacks = \"{policy}\": {why}"
        ))
    };
    match policy {
        CustomPolicy::Off => Err(denied("custom stacks are switched off".into())),
        CustomPolicy::AdminOnly if actor.admin => Ok(()),
        CustomPolicy::AdminOnly => Err(denied(format!(
            "only admins may register custom stacks, and {} is not an admin",
            actor.name
        ))),
        CustomPolicy::On if actor.admin => Ok(()),
        CustomPolicy::On if !actor.reader => Err(denied(format!(
            "{} has no role that may pull images",
            actor.name
        ))),
        CustomPolicy::On => {
            let prefix = format!("{}-", actor.name);
            if name.as_str().starts_with(&prefix) {
                Ok(())
            } else {
                Err(denied(format!(
                    "{} may register custom stacks only under the prefix {prefix:?}",
                    actor.name
                )))
            }
        }
    }
}

impl StackTable {
    /// Registers (or re-points) the custom stack `name`. Errors: a system
    /// stack of that name exists ([`StackError::Conflict`]); a custom stack
    /// of that name owned by someone else, unless `admin`.
    pub fn register_custom(
        &mut self,
        name: &StackName,
        stack: CustomStack,
        admin: bool,
    ) -> Result<(), StackError> {
        if self.stacks.contains_key(name) {
            return Err(StackError::Conflict(format!(
                "{name} is a system stack; a custom stack needs another name"
            )));
        }
        if let Some(old) = self.custom.get(name)
            && old.owner != stack.owner
            && !admin
        {
            return Err(StackError::Denied(format!(
                "custom stack {name} belongs to {}",
                old.owner
            )));
        }
        self.custom.insert(name.clone(), stack);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(name: &str, admin: bool, reader: bool) -> Actor {
        Actor {
            name: name.into(),
            admin,
            reader,
        }
    }

    #[test]
    fn policy_modes_against_roles() {
        let name: StackName = "alice-mine".parse().unwrap();
        let admin = actor("ops", true, true);
        let alice = actor("alice", false, true);
        let bob = actor("bob", false, true);
        let nobody = actor("anon", false, false);
        let ok = |p, a: &Actor| authorize(p, a, &name).is_ok();
        assert!(!ok(CustomPolicy::Off, &admin));
        assert!(ok(CustomPolicy::AdminOnly, &admin));
        assert!(!ok(CustomPolicy::AdminOnly, &alice));
        assert!(ok(CustomPolicy::On, &admin));
        assert!(ok(CustomPolicy::On, &alice));
        assert!(!ok(CustomPolicy::On, &bob));
        assert!(!ok(CustomPolicy::On, &nobody));
        let e = authorize(CustomPolicy::AdminOnly, &alice, &name).unwrap_err();
        assert!(
            e.to_string().contains("custom_stacks = \"admin-only\""),
            "{e}"
        );
        assert_eq!("admin-only".parse(), Ok(CustomPolicy::AdminOnly));
        assert!("maybe".parse::<CustomPolicy>().is_err());
    }
}
