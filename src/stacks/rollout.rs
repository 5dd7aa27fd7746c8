//! Staged rollout: which cells get a new promotion at a given percentage.
//!
//! Owns: the stable hash of (stack, promotion, cell). A cell is in the
//! rollout when its bucket (0..10 000, i.e. basis points) falls under the
//! percentage. The bucket depends only on the three names, so widening a
//! rollout only ever adds cells (a cell never moves back), every replica
//! answers alike, and each promotion draws a fresh sample of cells (the
//! first 10 % of one promotion are not always the same machines).

use sha2::Digest as _;

/// Buckets per 100 %.
pub const BUCKETS: u32 = 10_000;

/// The cell's bucket, in `0..BUCKETS`: the first 8 bytes of
/// sha256(`airlock-rollout-v1\0<stack>\0<promotion>\0<cell>`), as a
/// big-endian integer, modulo [`BUCKETS`].
pub fn bucket(stack: &str, promotion: u64, cell: &str) -> u32 {
    let mut h = sha2::Sha256::new();
    h.update(b"airlock-rollout-v1\0");
    h.update(stack.as_bytes());
    h.update(b"\0");
    h.update(promotion.to_string().as_bytes());
    h.update(b"\0");
    h.update(cell.as_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    (u64::from_be_bytes(first) % u64::from(BUCKETS)) as u32
}

/// True when `cell` runs `promotion` of `stack` at `percent` (0..=100).
pub fn selected(stack: &str, promotion: u64, cell: &str, percent: u8) -> bool {
    bucket(stack, promotion, cell) < u32::from(percent.min(100)) * (BUCKETS / 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_hold_and_widening_never_moves_back() {
        let cells: Vec<String> = (0..1000).map(|i| format!("diego-cell/{i:04}")).collect();
        let mut before: Vec<bool> = vec![false; cells.len()];
        for percent in [0u8, 10, 50, 100] {
            let now: Vec<bool> = cells
                .iter()
                .map(|c| selected("cflinuxfs4", 7, c, percent))
                .collect();
            let n = now.iter().filter(|x| **x).count() as i64;
            assert!((n - i64::from(percent) * 10).abs() <= 30, "{percent}%: {n}");
            assert!(before.iter().zip(&now).all(|(b, n)| !b || *n));
            before = now;
        }
    }
}
