//! Package version ordering per packaging system: Debian's (dpkg) and
//! Alpine's (apk). Pure functions of two strings; no I/O.

mod apk;
mod deb;

use std::cmp::Ordering;

/// A packaging system, which decides how its versions order.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Packaging {
    /// dpkg: Debian, Ubuntu and their derivatives (purl type `deb`).
    Deb,
    /// apk: Alpine (purl type `apk`).
    Apk,
}

impl Packaging {
    /// The purl type (`deb`, `apk`).
    pub fn purl_type(self) -> &'static str {
        match self {
            Packaging::Deb => "deb",
            Packaging::Apk => "apk",
        }
    }

    /// Orders versions `a` and `b` as the system's own tool does:
    /// `dpkg --compare-versions` for [`Packaging::Deb`], `apk version -t`
    /// for [`Packaging::Apk`].
    pub fn compare(self, a: &str, b: &str) -> Ordering {
        match self {
            Packaging::Deb => deb::compare(a, b),
            Packaging::Apk => apk::compare(a, b),
        }
    }
}
