//! `airlock user hash` (the `password_hash = "..."` line of a `[[user]]`),
//! `airlock user list` (configured users and token users) and `airlock
//! user revoke` (a token user).

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Result, bail};

use super::DataArg;
use airlock::auth::tokens;

#[derive(clap::Subcommand)]
pub enum UserCmd {
    /// Read a password (a terminal prompt without echo, asked twice; or
    /// the first line of stdin) and print its argon2id PHC hash as the
    /// config line `password_hash = "$argon2id$..."`.
    Hash,
    /// List the users: the `[[user]]` entries of a serve config (with
    /// --config) and the token users kept in the state (created by
    /// `stack kpack --pull-secret`), with roles, repository prefixes,
    /// when and by whom a token user was created.
    List {
        #[command(flatten)]
        data: DataArg,
        /// JSON output: `[{"name", "kind": "config"|"token", "roles",
        /// "repositories", "created", "by", "purpose"}]`.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token user: its token is refused (401) from the next
    /// request on, by every server on this store.
    Revoke {
        #[command(flatten)]
        data: DataArg,
        /// The token user.
        name: String,
    },
}

/// One row of `user list`.
#[derive(serde::Serialize)]
struct Row {
    name: String,
    kind: &'static str,
    roles: Vec<airlock::auth::Role>,
    repositories: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    created: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    purpose: Option<String>,
}

pub async fn run(cmd: UserCmd) -> Result<()> {
    match cmd {
        UserCmd::List { data, json } => list(&data, json).await,
        UserCmd::Revoke { data, name } => {
            let state = data.existing_state()?;
            let c = tokens::revoke(&state, &name, &airlock::state::user_at_host()).await?;
            println!("revoked token user {name} (generation {})", c.generation);
            Ok(())
        }
        UserCmd::Hash => {
            let password = if std::io::stdin().is_terminal() {
                let first = prompt("Password: ")?;
                let again = prompt("Again: ")?;
                if first != again {
                    bail!("the passwords differ");
                }
                first
            } else {
                let mut line = String::new();
                std::io::stdin().lock().read_line(&mut line)?;
                line.trim_end_matches(['\n', '\r']).to_string()
            };
            if password.is_empty() {
                bail!("empty password");
            }
            let hash = airlock::auth::password::hash(&password).map_err(anyhow::Error::msg)?;
            println!("password_hash = \"{hash}\"");
            Ok(())
        }
    }
}

/// The `[[user]]` entries of `--config` (whose `[store]` holds the token
/// users, as for every command), and the token users.
async fn list(data: &DataArg, json: bool) -> Result<()> {
    let mut rows = Vec::new();
    if let Some(settings) = data.settings()? {
        rows.extend(settings.users.into_iter().map(|u| Row {
            name: u.name,
            kind: "config",
            roles: u.roles,
            repositories: u.repositories,
            created: None,
            by: None,
            purpose: None,
        }));
    }
    // Token users live in the store; a data directory not made yet has none.
    let target = data.target()?;
    let exists = match &target.url {
        airlock::store::StoreUrl::File(dir) => dir.is_dir(),
        airlock::store::StoreUrl::S3 { .. } => true,
    };
    if exists {
        let table = tokens::list(&data.existing_state()?).await?;
        rows.extend(table.users.into_iter().map(|(name, u)| Row {
            name,
            kind: "token",
            roles: u.roles,
            repositories: u.repositories,
            created: Some(u.created),
            by: Some(u.by),
            purpose: Some(u.purpose),
        }));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    for r in rows {
        let roles: Vec<String> = r
            .roles
            .iter()
            .map(|x| format!("{x:?}").to_lowercase())
            .collect();
        let repos = if r.repositories.is_empty() {
            "all repositories".to_string()
        } else {
            r.repositories.join(", ")
        };
        print!("{} ({}): {} on {}", r.name, r.kind, roles.join(", "), repos);
        if let (Some(c), Some(b)) = (&r.created, &r.by) {
            print!("; created {c} by {b}");
        }
        if let Some(p) = &r.purpose {
            print!("; {p}");
        }
        println!();
    }
    Ok(())
}

/// Reads one line from the terminal on stdin with echo off.
fn prompt(text: &str) -> Result<String> {
    eprint!("{text}");
    std::io::stderr().flush()?;
    // SAFETY: termios calls on fd 0 with a zeroed struct filled by tcgetattr.
    let saved = unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(0, &mut t) != 0 {
            bail!("cannot read the terminal settings");
        }
        let saved = t;
        t.c_lflag &= !libc::ECHO;
        libc::tcsetattr(0, libc::TCSANOW, &t);
        saved
    };
    let mut line = String::new();
    let read = std::io::stdin().lock().read_line(&mut line);
    // SAFETY: restores the settings read above.
    unsafe {
        libc::tcsetattr(0, libc::TCSANOW, &saved);
    }
    eprintln!();
    read?;
    Ok(line.trim_end_matches(['\n', '\r']).to_string())
}
