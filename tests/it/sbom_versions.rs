//! Version ordering against the reference tools.
//!
//! Debian: 10,000 random version pairs plus the tricky cases (`~`, epochs,
//! `+deb12u1`, letters against digits, leading zeros) ordered by airlock
//! and by libapt's `apt_pkg.version_compare` (Debian's python3-apt), and a
//! sample of 300 of them plus every tricky case by `dpkg --compare-versions`
//! itself, which both must match (so libapt stands in for dpkg only where
//! it is shown to agree with it; dpkg costs one process per pair).
//!
//! Alpine: `apk version -t` is not packaged for Debian; the pairs of
//! apk-tools' own `test/version.data` (what its test suite requires `apk
//! version -t` to print, kept in tests/fixtures/apk-version.data) are
//! checked instead.

use std::cmp::Ordering;
use std::io::Write;
use std::process::{Command, Stdio};

use airlock::sbom::version::Packaging;
use rand::Rng;

const TRICKY: &[(&str, &str)] = &[
    ("1.0~rc1", "1.0"),
    ("1.0~rc1", "1.0~rc1~1"),
    ("1.0~~", "1.0~"),
    ("1.0", "1.0-0"),
    ("1:0.1", "2.0"),
    ("0:1.0", "1.0"),
    ("3.0.11-1~deb12u2", "3.0.11-1~deb12u1"),
    ("3.0.11-1+deb12u1", "3.0.11-1"),
    ("3.0.11-1~deb12u2", "3.0.11-1"),
    ("2.36-9+deb12u10", "2.36-9+deb12u4"),
    ("1.2a", "1.2+"),
    ("1.2a", "1.2"),
    ("1.2", "1.2.0"),
    ("1.002", "1.2"),
    ("1.0a", "1.0A"),
    ("1.0.", "1.0"),
    ("1.0+b1", "1.0"),
    ("1:1.2.13.dfsg-1+b1", "1:1.2.13.dfsg-1"),
    ("10", "9"),
    ("1.10", "1.9"),
    ("1.0-1ubuntu0.1", "1.0-1"),
    ("7.88.1-10+deb12u5", "7.88.1-10+deb12u12"),
    ("2:8.2.3995-1ubuntu2", "2:8.2.3995-1ubuntu2.1"),
    ("1.0~beta+git20200101", "1.0~beta"),
];

/// A random Debian version from pieces that make many near-equal pairs.
fn random_version(rng: &mut impl rand::Rng) -> String {
    const PIECES: &[&str] = &[
        "0", "1", "2", "9", "10", "01", "a", "b", "z", "A", "~", "~~", "+", ".", "rc", "deb12u",
        "+b",
    ];
    let mut v = String::new();
    if rng.gen_ratio(1, 5) {
        v.push_str(&format!("{}:", rng.gen_range(0..3)));
    }
    v.push_str(&rng.gen_range(0..12).to_string());
    for _ in 0..rng.gen_range(0..5) {
        v.push_str(PIECES[rng.gen_range(0..PIECES.len())]);
    }
    if rng.gen_ratio(2, 3) {
        v.push('-');
        v.push_str(&rng.gen_range(0..4).to_string());
        for _ in 0..rng.gen_range(0..3) {
            v.push_str(PIECES[rng.gen_range(0..PIECES.len())]);
        }
    }
    v
}

fn sign(o: Ordering) -> i32 {
    match o {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }
}

/// libapt's answers (-1, 0, 1) for every pair, in one process.
fn apt_pkg(pairs: &[(String, String)]) -> Vec<i32> {
    let script = "import sys, apt_pkg\napt_pkg.init_system()\nfor line in sys.stdin:\n    a, b = line.split()\n    r = apt_pkg.version_compare(a, b)\n    print((r > 0) - (r < 0))\n";
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("/usr/bin/python3 (apt-get install python3-apt)");
    let mut input = String::new();
    for (a, b) in pairs {
        input.push_str(&format!("{a} {b}\n"));
    }
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python3-apt is required by this test (apt-get install python3-apt): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// dpkg's answer for one pair.
fn dpkg(a: &str, b: &str) -> i32 {
    let test = |op: &str| {
        Command::new("dpkg")
            .args(["--compare-versions", a, op, b])
            .status()
            .expect("dpkg")
            .success()
    };
    if test("lt") {
        -1
    } else if test("eq") {
        0
    } else {
        assert!(test("gt"), "dpkg: {a} vs {b} is neither lt, eq nor gt");
        1
    }
}

#[test]
fn debian_ordering_agrees_with_dpkg_and_libapt() {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(29);
    let mut pairs: Vec<(String, String)> = TRICKY
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    while pairs.len() < TRICKY.len() + 10_000 {
        let a = random_version(&mut rng);
        let b = if rng.gen_ratio(1, 4) {
            a.clone()
        } else {
            random_version(&mut rng)
        };
        pairs.push((a, b));
    }
    let apt = apt_pkg(&pairs);
    let ours: Vec<i32> = pairs
        .iter()
        .map(|(a, b)| sign(Packaging::Deb.compare(a, b)))
        .collect();
    let disagree: Vec<_> = pairs
        .iter()
        .zip(&ours)
        .zip(&apt)
        .filter(|((_, o), a)| o != a)
        .take(10)
        .collect();
    assert!(disagree.is_empty(), "airlock vs libapt: {disagree:?}");
    // dpkg itself on every tricky case and 300 of the random pairs: airlock and libapt agree with it.
    let sample = (0..TRICKY.len()).chain((TRICKY.len()..pairs.len()).step_by(10_000 / 300));
    for i in sample {
        let (a, b) = &pairs[i];
        let d = dpkg(a, b);
        assert_eq!(
            (ours[i], apt[i]),
            (d, d),
            "{a} vs {b}: airlock, libapt, dpkg"
        );
    }
    let distinct = ours.iter().filter(|o| **o != 0).count();
    assert!(
        distinct > 5_000,
        "the random pairs are mostly unequal ({distinct})"
    );
}

#[test]
fn apk_ordering_agrees_with_apk_tools_test_vectors() {
    let data = include_str!("../fixtures/apk-version.data");
    let mut n = 0;
    for line in data
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let line = line.split('#').next().unwrap();
        let f: Vec<&str> = line.split_whitespace().collect();
        let (a, op, b) = (f[0], f[1], f[2]);
        let want = match op {
            "<" => Ordering::Less,
            "=" => Ordering::Equal,
            ">" => Ordering::Greater,
            other => panic!("operator {other}"),
        };
        assert_eq!(Packaging::Apk.compare(a, b), want, "{a} {op} {b}");
        assert_eq!(Packaging::Apk.compare(b, a), want.reverse(), "{b} vs {a}");
        n += 1;
    }
    assert!(n > 600, "{n} vectors");
}
