//! Relative links in Markdown: each `[text](target)` outside code must name
//! a file or directory that exists, and its `#anchor` a heading of the
//! target (GitHub's anchors).

use std::path::Path;

/// GitHub's anchor of a heading: lower case; letters, digits, `-` and `_`
/// kept, spaces turned into `-`, anything else dropped.
pub fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The text of `markdown` outside fenced code blocks, line by line.
fn prose(markdown: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push(line);
        }
    }
    out
}

/// The anchors of a Markdown file's headings (a repeated heading gets
/// `-1`, `-2`, ... as on GitHub).
fn anchors(markdown: &str) -> Vec<String> {
    let mut seen = std::collections::HashMap::new();
    let mut out = Vec::new();
    for line in prose(markdown) {
        let text = line.trim_start_matches('#');
        if text.len() == line.len() || !text.starts_with(' ') {
            continue;
        }
        let base = slug(text);
        let n = seen.entry(base.clone()).or_insert(0);
        out.push(if *n == 0 { base } else { format!("{base}-{n}") });
        *n += 1;
    }
    out
}

/// The link targets of a line, outside inline code spans.
fn targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut in_code = false;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'`' => in_code = !in_code,
            b']' if !in_code && bytes.get(i + 1) == Some(&b'(') => {
                if let Some(end) = line[i + 2..].find(')') {
                    out.push(&line[i + 2..i + 2 + end]);
                    i += 2 + end;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Every relative link of `file` that does not resolve, as `file: target: why`.
pub fn broken(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let dir = file.parent().unwrap();
    let mut out = Vec::new();
    for line in prose(&text) {
        for target in targets(line) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let resolved = if path.is_empty() {
                file.to_path_buf()
            } else {
                dir.join(path)
            };
            let why = if !resolved.exists() {
                Some("no such file")
            } else if !anchor.is_empty()
                && resolved.extension().is_some_and(|e| e == "md")
                && !anchors(&std::fs::read_to_string(&resolved).unwrap())
                    .iter()
                    .any(|a| a == anchor)
            {
                Some("no such heading")
            } else {
                None
            };
            if let Some(why) = why {
                out.push(format!("{}: {target}: {why}", file.display()));
            }
        }
    }
    out
}
