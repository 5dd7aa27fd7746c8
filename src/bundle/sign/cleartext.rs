//! The cleartext-signed message framing (RFC 9580 §7) and the canonical text.

use pgp::composed::CleartextSignedMessage;

use super::{SignError, signature_failure};

const SIGNED_MESSAGE_BEGIN: &str = "-----BEGIN PGP SIGNED MESSAGE-----";
const SIGNATURE_BEGIN: &str = "-----BEGIN PGP SIGNATURE-----";
pub(super) const SIGNATURE_END: &str = "-----END PGP SIGNATURE-----";

/// The signed text of a cleartext-signed document WITHOUT checking any signature
/// (for `bundle inspect`; never for import). Errors as [`Keyring::verify_cleartext`]'s framing errors.
pub fn unverified_text(armored: &str) -> Result<String, SignError> {
    let Framing { document, .. } = check_framing(armored)?;
    let (msg, _) = CleartextSignedMessage::from_string(document)
        .map_err(|e| SignError::NotCleartext(signature_failure(&e)))?;
    Ok(msg.signed_text().replace("\r\n", "\n"))
}

/// What [`check_framing`] found: the `Hash:` header values, and the document without
/// whatever whitespace follows the signature block.
pub(super) struct Framing<'a> {
    pub(super) hash_header: Vec<String>,
    pub(super) document: &'a str,
}

/// Checks what rPGP does not: the document starts with the cleartext header line, and nothing
/// but whitespace follows the signature block. (rPGP 0.21 also rejects trailing whitespace,
/// so the document is handed to it cut after the end line.)
pub(super) fn check_framing(armored: &str) -> Result<Framing<'_>, SignError> {
    if armored.trim().is_empty() {
        return Err(SignError::NotCleartext("empty input".into()));
    }
    let mut lines = armored.split_inclusive('\n');
    if lines.next().map(str::trim_end) != Some(SIGNED_MESSAGE_BEGIN) {
        return Err(SignError::NotCleartext(format!(
            "does not start with {SIGNED_MESSAGE_BEGIN}"
        )));
    }
    let mut hashes = Vec::new();
    let mut consumed = 0usize;
    let mut in_headers = true;
    let mut in_signature = false;
    for line in armored.split_inclusive('\n').skip(1) {
        consumed += line.len();
        let content = line.trim_end_matches(['\r', '\n']);
        if in_headers {
            if content.is_empty() {
                in_headers = false;
            } else if let Some(value) = content.strip_prefix("Hash:") {
                hashes.extend(value.split(',').map(|h| h.trim().to_string()));
            }
            continue;
        }
        if !in_signature {
            // Dash-escaping guarantees the first line starting with "-----" ends the text.
            if content.starts_with("-----") {
                if content != SIGNATURE_BEGIN {
                    return Err(SignError::NotCleartext(format!(
                        "expected {SIGNATURE_BEGIN} after the text, found {content:?}"
                    )));
                }
                in_signature = true;
            }
            continue;
        }
        if content == SIGNATURE_END {
            let first = armored.split_inclusive('\n').next().map_or(0, str::len);
            let rest = &armored[first + consumed..];
            if !rest.trim().is_empty() {
                return Err(SignError::TrailingData);
            }
            return Ok(Framing {
                hash_header: hashes,
                document: &armored[..first + consumed],
            });
        }
    }
    Err(SignError::NotCleartext(format!("no {SIGNATURE_END} line")))
}

/// The canonical form of a text to sign: `\n` line endings, no trailing spaces/tabs.
pub(super) fn canonical_text(text: &str) -> String {
    let unified = text.replace("\r\n", "\n").replace('\r', "\n");
    let mut out = String::with_capacity(unified.len());
    for line in unified.split_inclusive('\n') {
        let (content, eol) = match line.strip_suffix('\n') {
            Some(c) => (c, "\n"),
            None => (line, ""),
        };
        out.push_str(content.trim_end_matches([' ', '\t']));
        out.push_str(eol);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_text_trims_and_unifies_line_endings() {
        assert_eq!(canonical_text("a  \r\nb\t\rc \n"), "a\nb\nc\n");
        assert_eq!(canonical_text("{\"x\": 1}"), "{\"x\": 1}");
        assert_eq!(canonical_text(""), "");
    }

    #[test]
    fn framing_rejects_trailing_text_and_reads_hash_header() {
        let doc = "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n- -x\n\
                   -----BEGIN PGP SIGNATURE-----\n\nAAAA\n-----END PGP SIGNATURE-----\n";
        let framing = check_framing(doc).unwrap();
        assert_eq!(framing.hash_header, vec!["SHA256".to_string()]);
        assert_eq!(framing.document, doc);
        let padded = format!("{doc}\n  \n");
        assert_eq!(check_framing(&padded).unwrap().document, doc);
        assert!(matches!(
            check_framing(&format!("{doc}x\n")),
            Err(SignError::TrailingData)
        ));
        assert!(matches!(
            check_framing(&format!("junk\n{doc}")),
            Err(SignError::NotCleartext(_))
        ));
    }
}
