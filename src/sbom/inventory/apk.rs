//! apk's installed database, `lib/apk/db/installed`: one stanza per
//! package, one `X:value` line per field, stanzas separated by a blank
//! line (apk-tools' "installed database" format: `P` name, `V` version,
//! `A` architecture, `o` origin, the source package, `L` license).

use super::Package;
use crate::sbom::version::Packaging;

/// The packages of an apk installed database, in file order.
pub fn parse(text: &str, out: &mut Vec<Package>) {
    let mut cur: Option<Package> = None;
    let blank = || Package {
        packaging: Packaging::Apk,
        name: String::new(),
        version: String::new(),
        arch: String::new(),
        source: None,
        source_version: None,
        license: None,
    };
    let flush = |p: Option<Package>, out: &mut Vec<Package>| {
        if let Some(p) = p.filter(|p| !p.name.is_empty() && !p.version.is_empty()) {
            out.push(p);
        }
    };
    for line in text.lines() {
        if line.trim().is_empty() {
            flush(cur.take(), out);
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let p = cur.get_or_insert_with(blank);
        let value = value.to_string();
        match key {
            "P" => p.name = value,
            "V" => p.version = value,
            "A" => p.arch = value,
            "o" => p.source = Some(value),
            "L" => p.license = Some(value),
            _ => {}
        }
    }
    flush(cur, out);
}
