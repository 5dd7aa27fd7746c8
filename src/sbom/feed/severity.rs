//! Severity levels from what feeds carry: a CVSS v3.x base vector
//! (computed by the CVSS v3.1 specification §7.1 base equations and its
//! §5 qualitative rating scale), an Ubuntu priority, a Debian urgency, a
//! GHSA-style `database_specific.severity`.

/// The levels, worst first (`unknown` when the feed says nothing usable).
pub const LEVELS: [&str; 6] = ["critical", "high", "medium", "low", "negligible", "unknown"];

/// A level from a free-text label (`HIGH`, `moderate`, `low**`,
/// `unimportant`, `not yet assigned`, ...). `None` when it is no level.
pub fn from_label(label: &str) -> Option<&'static str> {
    let l = label.trim().trim_end_matches('*').to_ascii_lowercase();
    Some(match l.as_str() {
        "critical" => "critical",
        "high" | "important" => "high",
        "medium" | "moderate" => "medium",
        "low" => "low",
        "negligible" | "unimportant" | "none" => "negligible",
        _ => return None,
    })
}

/// The rating of a CVSS v3.0/v3.1 base vector
/// (`CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H` → `critical`). `None`
/// for other vectors or a missing base metric.
pub fn from_cvss3(vector: &str) -> Option<&'static str> {
    let score = cvss3_base(vector)?;
    Some(if score <= 0.0 {
        "negligible"
    } else if score < 4.0 {
        "low"
    } else if score < 7.0 {
        "medium"
    } else if score < 9.0 {
        "high"
    } else {
        "critical"
    })
}

/// CVSS v3.1 "Roundup": the smallest number with one decimal >= `x`.
fn roundup(x: f64) -> f64 {
    let i = (x * 100_000.0).round() as i64;
    if i % 10_000 == 0 {
        i as f64 / 100_000.0
    } else {
        ((i / 10_000) + 1) as f64 / 10.0
    }
}

/// The CVSS v3.x base score of `vector`.
pub fn cvss3_base(vector: &str) -> Option<f64> {
    let mut parts = vector.split('/');
    if !parts.next()?.starts_with("CVSS:3") {
        return None;
    }
    let mut m = std::collections::HashMap::new();
    for p in parts {
        let (k, v) = p.split_once(':')?;
        m.insert(k, v);
    }
    let changed = match *m.get("S")? {
        "U" => false,
        "C" => true,
        _ => return None,
    };
    let av = match *m.get("AV")? {
        "N" => 0.85,
        "A" => 0.62,
        "L" => 0.55,
        "P" => 0.2,
        _ => return None,
    };
    let ac = match *m.get("AC")? {
        "L" => 0.77,
        "H" => 0.44,
        _ => return None,
    };
    let pr = match (*m.get("PR")?, changed) {
        ("N", _) => 0.85,
        ("L", false) => 0.62,
        ("L", true) => 0.68,
        ("H", false) => 0.27,
        ("H", true) => 0.5,
        _ => return None,
    };
    let ui = match *m.get("UI")? {
        "N" => 0.85,
        "R" => 0.62,
        _ => return None,
    };
    let cia = |k: &str| -> Option<f64> {
        Some(match *m.get(k)? {
            "H" => 0.56,
            "L" => 0.22,
            "N" => 0.0,
            _ => return None,
        })
    };
    let iss = 1.0 - (1.0 - cia("C")?) * (1.0 - cia("I")?) * (1.0 - cia("A")?);
    let impact = if changed {
        7.52 * (iss - 0.029) - 3.25 * (iss - 0.02).powi(15)
    } else {
        6.42 * iss
    };
    let exploitability = 8.22 * av * ac * pr * ui;
    if impact <= 0.0 {
        return Some(0.0);
    }
    Some(if changed {
        roundup((1.08 * (impact + exploitability)).min(10.0))
    } else {
        roundup((impact + exploitability).min(10.0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cvss_examples_from_nvd() {
        // Scores as NVD publishes them for these vectors.
        for (v, score) in [
            ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", 9.8),
            ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H", 10.0),
            ("CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:N/A:N", 5.9),
            ("CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:N/I:N/A:H", 5.5),
            ("CVSS:3.0/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N", 6.1),
            ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N", 0.0),
        ] {
            assert_eq!(cvss3_base(v), Some(score), "{v}");
        }
        assert_eq!(
            from_cvss3("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"),
            Some("critical")
        );
        assert_eq!(from_label("low**"), Some("low"));
        assert_eq!(from_label("not yet assigned"), None);
    }
}
