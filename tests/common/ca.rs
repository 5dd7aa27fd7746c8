//! A test certificate authority made with `openssl`: a CA, server and
//! client certificates it signs (P-256 keys, valid two days).

use std::path::Path;
use std::process::Command;

use super::run_ok;

/// Runs openssl, asserting success.
pub fn openssl(dir: &Path, args: &[&str]) {
    run_ok(Command::new("openssl").current_dir(dir).args(args));
}

/// A new P-256 private key in `dir/file`.
pub fn ec_key(dir: &Path, file: &str) {
    openssl(
        dir,
        &[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            file,
        ],
    );
}

/// A P-256 key and a certificate for `cn` signed by `ca` (`ca.crt`,
/// `ca.key` in `dir`), with `ext` extensions: `NAME.key`, `NAME.crt`.
pub fn issue(dir: &Path, ca: &str, name: &str, cn: &str, ext: &str) {
    let key = format!("{name}.key");
    let csr = format!("{name}.csr");
    let crt = format!("{name}.crt");
    let extfile = format!("{name}.ext");
    std::fs::write(dir.join(&extfile), ext).unwrap();
    ec_key(dir, &key);
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-key",
            &key,
            "-out",
            &csr,
            "-subj",
            &format!("/CN={cn}"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &extfile,
        ],
    );
}

/// A self-signed CA `NAME.crt` / `NAME.key` in `dir`.
pub fn make_ca(dir: &Path, name: &str) {
    super::require_tool("openssl", "openssl");
    ec_key(dir, &format!("{name}.key"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
        ],
    );
}

/// Extensions of a server certificate for 127.0.0.1 and localhost.
pub const SERVER_EXT: &str =
    "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n";
/// Extensions of a client certificate.
pub const CLIENT_EXT: &str = "extendedKeyUsage=clientAuth\n";
