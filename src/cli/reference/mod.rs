//! The generated reference in `docs/reference/` and the check that keeps
//! it and the documentation's links current (tests only).
//!
//! Owns: `docs/reference/cli.md` (every command's `--help`, rendered from
//! the clap definition of [`super::Cli`]), `docs/reference/config.md`
//! (every config key, see [`config`]), the table of every HTTP route and
//! who may call it in `docs/users-and-tls.md` (from
//! `airlock::server::routes`), and the check that every relative
//! link in README.md and `docs/` resolves (file and heading anchor, see
//! [`links`]). Each test compares the file with what the code gives and
//! fails naming the command that rewrites it; with `UPDATE_DOCS=1` it
//! writes the file instead. Never changes anything the binary does.

mod config;
mod links;

use std::path::PathBuf;

use clap::CommandFactory;

/// The command that regenerates the reference files.
const UPDATE: &str = "UPDATE_DOCS=1 cargo test --release --bin airlock reference";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The command tree, with environment values hidden (the help text must
/// not depend on the variables set where the test runs) and built (bin
/// names and global flags propagated).
fn command() -> clap::Command {
    fn hide(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| a.hide_env_values(true))
            .mut_subcommands(hide)
    }
    let mut cmd = hide(super::Cli::command());
    cmd.build();
    cmd
}

/// `docs/reference/cli.md`: an index, then every command's long help.
fn cli_markdown() -> String {
    fn walk(cmd: &clap::Command, out: &mut Vec<(String, String, String)>) {
        let name = cmd.get_bin_name().unwrap_or(cmd.get_name()).to_string();
        let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
        let help = cmd.clone().render_long_help().to_string();
        out.push((name, about, help));
        for sub in cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        {
            walk(sub, out);
        }
    }
    let mut commands = Vec::new();
    walk(&command(), &mut commands);
    let mut out = String::from(
        "# Command-line reference\n\n\
         Every command and flag, as `airlock <command> --help` prints it; generated from\n\
         the clap definitions in `src/cli/` by\n\
         `UPDATE_DOCS=1 cargo test --release --bin airlock reference`; do not edit by hand.\n\
         Config file keys: [config.md](config.md); the guides: [docs/](../README.md).\n\n",
    );
    for (name, about, _) in &commands {
        out.push_str(&format!("- [{name}](#{}): {about}\n", links::slug(name)));
    }
    for (name, _, help) in &commands {
        let help: Vec<&str> = help.lines().map(str::trim_end).collect();
        out.push_str(&format!(
            "\n## {name}\n\n```text\n{}\n```\n",
            help.join("\n").trim()
        ));
    }
    out
}

/// Passes when `path` (relative to the repository) holds `text`; with
/// `UPDATE_DOCS=1` writes it. Fails naming the command that rewrites it.
fn check(path: &str, text: &str) {
    let file = repo().join(path);
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, text).unwrap();
        return;
    }
    let current = std::fs::read_to_string(&file).unwrap_or_default();
    if current != text {
        let line = current
            .lines()
            .zip(text.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| current.lines().count().min(text.lines().count()));
        panic!(
            "{path} is stale (first difference at line {}): regenerate it with\n    {UPDATE}\nand commit the result",
            line + 1
        );
    }
}

#[test]
fn cli_reference_is_current() {
    check("docs/reference/cli.md", &cli_markdown());
}

#[test]
fn config_reference_is_current() {
    let cmd = command();
    let serve = cmd.find_subcommand("serve").expect("the serve command");
    check(
        "docs/reference/config.md",
        &config::markdown(&repo(), serve),
    );
}

/// The markers around the generated route table in docs/users-and-tls.md.
const ROUTES_BEGIN: &str = "<!-- routes: generated from src/server/routes.rs; do not edit -->\n";
const ROUTES_END: &str = "<!-- end of routes -->\n";

/// docs/users-and-tls.md with the table of every route and who may call
/// it (`airlock::server::routes::markdown`) between its markers.
fn users_doc_with_routes() -> String {
    let path = repo().join("docs/users-and-tls.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let begin = text
        .find(ROUTES_BEGIN)
        .expect("the routes markers in docs/users-and-tls.md");
    let end = text[begin..].find(ROUTES_END).expect("the end marker") + begin;
    format!(
        "{}{ROUTES_BEGIN}{}{}",
        &text[..begin],
        airlock::server::routes::markdown(),
        &text[end..]
    )
}

#[test]
fn route_table_is_current() {
    check("docs/users-and-tls.md", &users_doc_with_routes());
}

#[test]
fn relative_links_resolve() {
    let root = repo();
    let mut files = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    let broken: Vec<String> = files.iter().flat_map(|f| links::broken(f)).collect();
    assert!(
        broken.is_empty(),
        "broken relative links:\n{}",
        broken.join("\n")
    );
    assert!(files.len() > 10, "docs/ holds the guides: {files:?}");
}

#[test]
fn slugs_are_github_anchors() {
    // As GitHub renders them (lower case, punctuation but `-` and `_`
    // dropped, spaces to `-`).
    assert_eq!(
        links::slug("Serving: OCI distribution-spec v1.1"),
        "serving-oci-distribution-spec-v11"
    );
    assert_eq!(
        links::slug("Custom stacks (`custom_stacks` policy)"),
        "custom-stacks-custom_stacks-policy"
    );
    assert_eq!(links::slug("The `/stacks/v1` API"), "the-stacksv1-api");
}
