//! The rollout chart: cells per reported digest over time, as an SVG drawn
//! on the server (no script): one stacked band per digest (the promotion
//! being rolled out at the bottom, then the one the other cells keep, then
//! any other), each a step area over the samples, and the rollout target
//! (percentage × cells) as a dashed line over the bottom band. The bands
//! carry their digest and latest count in `<title>` (a tooltip), and the
//! whole chart a text description for screen readers.
//!
//! Owns: the geometry. Never reads state: it draws the [`Point`]s it is
//! given.

use maud::{Markup, html as m};

use super::series::Point;
use crate::digest::Digest;

const W: f64 = 800.0;
const H: f64 = 260.0;
const LEFT: f64 = 52.0;
const RIGHT: f64 = 14.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 34.0;

/// One band: the digest it counts, its CSS class (`band-active`,
/// `band-previous`, `band-other-N`) and its label.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Band {
    /// Reported digests counted in this band (several for "other").
    pub digests: Vec<Digest>,
    /// The CSS class suffix: `active`, `previous`, `other-0` ...
    pub class: String,
    /// What the legend says.
    pub label: String,
}

/// The smallest "nice" axis maximum ≥ `n` (1, 2, 5 × 10^k).
fn nice(n: usize) -> usize {
    let n = n.max(1);
    let mut step = 1;
    loop {
        for m in [1, 2, 5] {
            if m * step >= n {
                return m * step;
            }
        }
        step *= 10;
    }
}

fn hhmm(p: &Point) -> String {
    // `2026-11-30T01:33:18Z` → `01:33`.
    p.time.get(11..16).unwrap_or("").to_string()
}

/// The chart of `points` (oldest first) with `bands` stacked bottom-up.
/// `title` names it (the stack); an empty series draws an empty frame.
pub fn rollout(title: &str, points: &[Point], bands: &[Band]) -> Markup {
    let n = points.len();
    let counts: Vec<Vec<usize>> = points
        .iter()
        .map(|p| {
            bands
                .iter()
                .map(|b| b.digests.iter().filter_map(|d| p.digests.get(d)).sum())
                .collect()
        })
        .collect();
    let ymax = nice(points.iter().map(|p| p.cells).max().unwrap_or(0));
    let (t0, t1) = match (points.first(), points.last()) {
        (Some(a), Some(b)) => (a.unix, b.unix),
        _ => (0, 0),
    };
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    // Step i spans [x(i), x(i+1)); the last one reaches the right edge.
    let x = |i: usize| -> f64 {
        if i >= n || t1 == t0 {
            if i == 0 { LEFT } else { LEFT + plot_w }
        } else {
            LEFT + (points[i].unix - t0) as f64 / (t1 - t0) as f64 * plot_w * (n - 1) as f64
                / n as f64
        }
    };
    let y = |v: usize| TOP + plot_h * (1.0 - v as f64 / ymax as f64);
    let mut polys = Vec::new();
    for (bi, band) in bands.iter().enumerate() {
        let below = |i: usize| counts[i][..bi].iter().sum::<usize>();
        let top = |i: usize| below(i) + counts[i][bi];
        let mut pts = Vec::with_capacity(4 * n);
        for i in 0..n {
            pts.push((x(i), y(top(i))));
            pts.push((x(i + 1), y(top(i))));
        }
        for i in (0..n).rev() {
            pts.push((x(i + 1), y(below(i))));
            pts.push((x(i), y(below(i))));
        }
        let path: Vec<String> = pts.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
        let now = counts.last().map_or(0, |c| c[bi]);
        polys.push((band, path.join(" "), now));
    }
    let target: Vec<String> = points
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let want = p.percent? as f64 / 100.0 * p.cells as f64;
            let yy = TOP + plot_h * (1.0 - want / ymax as f64);
            Some(format!("{:.1},{yy:.1} {:.1},{yy:.1}", x(i), x(i + 1)))
        })
        .collect();
    let desc = match counts.last() {
        Some(c) => bands
            .iter()
            .zip(c)
            .map(|(b, k)| format!("{}: {k} cells", b.label))
            .collect::<Vec<_>>()
            .join("; "),
        None => "no samples yet".into(),
    };
    m! {
        svg.chart role="img" aria-labelledby="chart-title chart-desc"
            viewBox=(format!("0 0 {W} {H}")) xmlns="http://www.w3.org/2000/svg" {
            title id="chart-title" { "Cells per digest over time: " (title) }
            desc id="chart-desc" { (desc) }
            @for k in [0usize, 1, 2] {
                line.grid x1=(LEFT) x2=(W - RIGHT) y1=(y(ymax * k / 2)) y2=(y(ymax * k / 2)) {}
                text x=(LEFT - 6.0) y=(y(ymax * k / 2) + 4.0) text-anchor="end" { (ymax * k / 2) }
            }
            @for (band, path, now) in &polys {
                polygon class=(format!("band-{}", band.class)) points=(path) {
                    title { (band.label) ": " (now) " cells now" }
                }
            }
            @if !target.is_empty() {
                polyline.pct points=(target.join(" ")) {
                    title { "rollout target: percentage × cells" }
                }
            }
            line.axis x1=(LEFT) x2=(LEFT) y1=(TOP) y2=(H - BOTTOM) {}
            line.axis x1=(LEFT) x2=(W - RIGHT) y1=(H - BOTTOM) y2=(H - BOTTOM) {}
            @if let (Some(a), Some(b)) = (points.first(), points.last()) {
                text x=(LEFT) y=(H - 12.0) { (hhmm(a)) " UTC" }
                text x=(W - RIGHT) y=(H - 12.0) text-anchor="end" { (hhmm(b)) " UTC" }
            } @else {
                text x=(LEFT + plot_w / 2.0) y=(TOP + plot_h / 2.0) text-anchor="middle" { "no samples yet" }
            }
            text x="12" y=(TOP + plot_h / 2.0) transform=(format!("rotate(-90 12 {})", TOP + plot_h / 2.0)) text-anchor="middle" { "cells" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn point(unix: u64, a: usize, b: usize, a_d: &Digest, b_d: &Digest) -> Point {
        let mut digests = BTreeMap::new();
        digests.insert(a_d.clone(), a);
        digests.insert(b_d.clone(), b);
        Point {
            time: format!("2026-11-30T01:{:02}:00Z", unix / 60),
            unix,
            cells: a + b,
            digests,
            on_latest: a,
            lagging: 0,
            silent: 0,
            promotion: Some(2),
            percent: Some(10),
        }
    }

    #[test]
    fn bands_stack_and_scale() {
        let (new, old) = (Digest::sha256_of(b"new"), Digest::sha256_of(b"old"));
        let bands = vec![
            Band {
                digests: vec![new.clone()],
                class: "active".into(),
                label: "promotion 2".into(),
            },
            Band {
                digests: vec![old.clone()],
                class: "previous".into(),
                label: "promotion 1".into(),
            },
        ];
        let pts = vec![point(0, 0, 200, &new, &old), point(60, 21, 179, &new, &old)];
        let svg = rollout("bb", &pts, &bands).into_string();
        assert_eq!(nice(200), 200);
        assert_eq!(nice(201), 500);
        assert_eq!(nice(0), 1);
        assert!(svg.contains("promotion 2: 21 cells now"), "{svg}");
        assert!(svg.contains("promotion 1: 179 cells now"));
        assert!(svg.contains("promotion 2: 21 cells; promotion 1: 179 cells"));
        assert_eq!(svg.matches("<polygon").count(), 2);
        // The bottom band of the first sample is empty: its top is the axis.
        let bottom = H - BOTTOM;
        assert!(svg.contains(&format!("{LEFT:.1},{bottom:.1}")));
        assert!(!svg.contains("style="));
    }

    #[test]
    fn empty_series_draws_a_frame() {
        let svg = rollout("bb", &[], &[]).into_string();
        assert!(svg.contains("no samples yet"));
    }
}
