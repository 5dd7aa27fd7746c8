//! dpkg's package database: `var/lib/dpkg/status`, and the one-file-per-
//! package `var/lib/dpkg/status.d/` distroless images carry instead
//! (deb822 control stanzas, deb-control(5), dpkg's `lib/dpkg/parse.c`).

use super::Package;
use crate::sbom::version::Packaging;

/// The fields of one stanza that an inventory needs.
#[derive(Default)]
struct Stanza {
    package: Option<String>,
    version: Option<String>,
    arch: Option<String>,
    status: Option<String>,
    source: Option<String>,
    license: Option<String>,
}

/// Whether a `Status:` value (`want flag status`) leaves the package's
/// files on disk: every status but `not-installed` and `config-files`.
/// Distroless stanzas may carry no status at all: installed.
fn present(status: Option<&str>) -> bool {
    match status.and_then(|s| s.split_whitespace().nth(2)) {
        Some(s) => s != "not-installed" && s != "config-files",
        None => status.is_none(),
    }
}

fn finish(s: Stanza, out: &mut Vec<Package>) {
    if !present(s.status.as_deref()) {
        return;
    }
    let (Some(name), Some(version)) = (s.package, s.version) else {
        return;
    };
    // `Source: name` or `Source: name (version)` (a binNMU, or a binary
    // package versioned apart from its source).
    let (source, source_version) = match s.source.as_deref().map(str::trim) {
        Some(src) => match src.split_once(' ') {
            Some((n, v)) => (
                Some(n.to_string()),
                Some(
                    v.trim()
                        .trim_start_matches('(')
                        .trim_end_matches(')')
                        .to_string(),
                ),
            ),
            None => (Some(src.to_string()), None),
        },
        None => (None, None),
    };
    out.push(Package {
        packaging: Packaging::Deb,
        name,
        version,
        arch: s.arch.unwrap_or_default(),
        source,
        source_version,
        license: s.license,
    });
}

/// The packages of one dpkg database file (status or a `status.d/` file),
/// in file order, without those whose status says their files are gone.
/// Lines that are not `Field: value` or continuations are skipped (dpkg
/// would refuse the file; an inventory reports what it can read).
pub fn parse(text: &str, out: &mut Vec<Package>) {
    let mut cur = Stanza::default();
    let mut any = false;
    for line in text.lines() {
        if line.trim().is_empty() {
            if any {
                finish(std::mem::take(&mut cur), out);
                any = false;
            }
            continue;
        }
        if line.starts_with([' ', '\t']) {
            continue; // continuation of a multi-line field (Description, Conffiles)
        }
        let Some((field, value)) = line.split_once(':') else {
            continue;
        };
        any = true;
        let value = Some(value.trim().to_string());
        match field.to_ascii_lowercase().as_str() {
            "package" => cur.package = value,
            "version" => cur.version = value,
            "architecture" => cur.arch = value,
            "status" => cur.status = value,
            "source" => cur.source = value,
            "license" => cur.license = value,
            _ => {}
        }
    }
    if any {
        finish(cur, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stanzas_sources_and_statuses() {
        let text = "Package: libssl3\nStatus: install ok installed\nArchitecture: amd64\n\
Source: openssl\nVersion: 3.0.11-1~deb12u2\nDescription: x\n more\n\n\
Package: gone\nStatus: deinstall ok config-files\nVersion: 1\n\n\
Package: zlib1g\nStatus: install ok installed\nSource: zlib (1:1.2.13.dfsg-1)\nVersion: 1:1.2.13.dfsg-1+b1\nArchitecture: amd64\n";
        let mut out = Vec::new();
        parse(text, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(
            (
                out[0].name.as_str(),
                out[0].source.as_deref(),
                out[0].version.as_str()
            ),
            ("libssl3", Some("openssl"), "3.0.11-1~deb12u2")
        );
        assert_eq!(out[1].source_version.as_deref(), Some("1:1.2.13.dfsg-1"));
    }
}
