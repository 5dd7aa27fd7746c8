//! `airlock user hash`: the `password_hash = "..."` line of a `[[user]]`.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Result, bail};

#[derive(clap::Subcommand)]
pub enum UserCmd {
    /// Read a password (a terminal prompt without echo, asked twice; or
    /// the first line of stdin) and print its argon2id PHC hash as the
    /// config line `password_hash = "$argon2id$..."`.
    Hash,
}

pub fn run(cmd: UserCmd) -> Result<()> {
    match cmd {
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
