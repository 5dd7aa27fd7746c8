//! casync's content-defined chunker (`src/cachunker.c`), as a pure function
//! of bytes: no I/O, no state beyond the slice it is given.
//!
//! The rolling hash is buzhash over the last [`WINDOW`] bytes with
//! casync's table; a chunk of `c` bytes ends where
//! `h(data[c-48..c]) mod d == d - 1` for the first `c` in `min..=max`, else
//! at `max`, else where the blob ends. The discriminator `d` is derived
//! from the average size exactly as `CA_CHUNKER_DISCRIMINATOR_FROM_AVG`
//! does (`avg / (-1.42888852e-7 * avg + 1.33237515)`, truncated, clamped to
//! `min..=max`). Because buzhash is a function of the window's bytes alone,
//! the hash is started at `min` instead of rolled over the first `min`
//! bytes: the cuts are the same, the work per chunk smaller.

/// Bytes in the rolling window (`CA_CHUNKER_WINDOW_SIZE`).
pub const WINDOW: usize = 48;

/// casync's buzhash table (`buzhash_table[]` in `src/cachunker.c`).
const TABLE: [u32; 256] = [
    0x458be752, 0xc10748cc, 0xfbbcdbb8, 0x6ded5b68, 0xb10a82b5, 0x20d75648, 0xdfc5665f, 0xa8428801,
    0x7ebf5191, 0x841135c7, 0x65cc53b3, 0x280a597c, 0x16f60255, 0xc78cbc3e, 0x294415f5, 0xb938d494,
    0xec85c4e6, 0xb7d33edc, 0xe549b544, 0xfdeda5aa, 0x882bf287, 0x3116737c, 0x05569956, 0xe8cc1f68,
    0x0806ac5e, 0x22a14443, 0x15297e10, 0x50d090e7, 0x4ba60f6f, 0xefd9f1a7, 0x5c5c885c, 0x82482f93,
    0x9bfd7c64, 0x0b3e7276, 0xf2688e77, 0x8fad8abc, 0xb0509568, 0xf1ada29f, 0xa53efdfe, 0xcb2b1d00,
    0xf2a9e986, 0x6463432b, 0x95094051, 0x5a223ad2, 0x9be8401b, 0x61e579cb, 0x1a556a14, 0x5840fdc2,
    0x9261ddf6, 0xcde002bb, 0x52432bb0, 0xbf17373e, 0x7b7c222f, 0x2955ed16, 0x9f10ca59, 0xe840c4c9,
    0xccabd806, 0x14543f34, 0x1462417a, 0x0d4a1f9c, 0x087ed925, 0xd7f8f24c, 0x7338c425, 0xcf86c8f5,
    0xb19165cd, 0x9891c393, 0x325384ac, 0x0308459d, 0x86141d7e, 0xc922116a, 0xe2ffa6b6, 0x53f52aed,
    0x2cd86197, 0xf5b9f498, 0xbf319c8f, 0xe0411fae, 0x977eb18c, 0xd8770976, 0x9833466a, 0xc674df7f,
    0x8c297d45, 0x8ca48d26, 0xc49ed8e2, 0x7344f874, 0x556f79c7, 0x6b25eaed, 0xa03e2b42, 0xf68f66a4,
    0x8e8b09a2, 0xf2e0e62a, 0x0d3a9806, 0x9729e493, 0x8c72b0fc, 0x160b94f6, 0x450e4d3d, 0x7a320e85,
    0xbef8f0e1, 0x21d73653, 0x4e3d977a, 0x1e7b3929, 0x1cc6c719, 0xbe478d53, 0x8d752809, 0xe6d8c2c6,
    0x275f0892, 0xc8acc273, 0x4cc21580, 0xecc4a617, 0xf5f7be70, 0xe795248a, 0x375a2fe9, 0x425570b6,
    0x8898dcf8, 0xdc2d97c4, 0x0106114b, 0x364dc22f, 0x1e0cad1f, 0xbe63803c, 0x5f69fac2, 0x4d5afa6f,
    0x1bc0dfb5, 0xfb273589, 0x0ea47f7b, 0x3c1c2b50, 0x21b2a932, 0x6b1223fd, 0x2fe706a8, 0xf9bd6ce2,
    0xa268e64e, 0xe987f486, 0x3eacf563, 0x1ca2018c, 0x65e18228, 0x2207360a, 0x57cf1715, 0x34c37d2b,
    0x1f8f3cde, 0x93b657cf, 0x31a019fd, 0xe69eb729, 0x8bca7b9b, 0x4c9d5bed, 0x277ebeaf, 0xe0d8f8ae,
    0xd150821c, 0x31381871, 0xafc3f1b0, 0x927db328, 0xe95effac, 0x305a47bd, 0x426ba35b, 0x1233af3f,
    0x686a5b83, 0x50e072e5, 0xd9d3bb2a, 0x8befc475, 0x487f0de6, 0xc88dff89, 0xbd664d5e, 0x971b5d18,
    0x63b14847, 0xd7d3c1ce, 0x7f583cf3, 0x72cbcb09, 0xc0d0a81c, 0x7fa3429b, 0xe9158a1b, 0x225ea19a,
    0xd8ca9ea3, 0xc763b282, 0xbb0c6341, 0x020b8293, 0xd4cd299d, 0x58cfa7f8, 0x91b4ee53, 0x37e4d140,
    0x95ec764c, 0x30f76b06, 0x5ee68d24, 0x679c8661, 0xa41979c2, 0xf2b61284, 0x4fac1475, 0x0adb49f9,
    0x19727a23, 0x15a7e374, 0xc43a18d5, 0x3fb1aa73, 0x342fc615, 0x924c0793, 0xbee2d7f0, 0x8a279de9,
    0x4aa2d70c, 0xe24dd37f, 0xbe862c0b, 0x177c22c2, 0x5388e5ee, 0xcd8a7510, 0xf901b4fd, 0xdbc13dbc,
    0x6c0bae5b, 0x64efe8c7, 0x48b02079, 0x80331a49, 0xca3d8ae6, 0xf3546190, 0xfed7108b, 0xc49b941b,
    0x32baf4a9, 0xeb833a4a, 0x88a3f1a5, 0x3a91ce0a, 0x3cc27da1, 0x7112e684, 0x4a3096b1, 0x3794574c,
    0xa3c8b6f3, 0x1d213941, 0x6e0a2e00, 0x233479f1, 0x0f4cd82f, 0x6093edd2, 0x5d7d209e, 0x464fe319,
    0xd4dcac9e, 0x0db845cb, 0xfb5e4bc3, 0xe0256ce1, 0x09fb4ed1, 0x0914be1e, 0xa5bdb2c3, 0xc6eb57bb,
    0x30320350, 0x3f397e91, 0xa67791bc, 0x86bc0e2c, 0xefa0a7e2, 0xe9ff7543, 0xe733612c, 0xd185897b,
    0x329e5388, 0x91dd236b, 0x2ecb0d93, 0xf4d82a3d, 0x35b5c03f, 0xe4e606f0, 0x05b21843, 0x37b45964,
    0x5eff22f4, 0x6027f4cc, 0x77178b3c, 0xae507131, 0x7bf7cabc, 0xf9c18d66, 0x593ade65, 0xd95ddf11,
];

/// `TABLE[b]` rotated left by [`WINDOW`] (mod 32): what leaving the window removes.
const LEAVE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = TABLE[i].rotate_left(WINDOW as u32);
        i += 1;
    }
    t
};

/// Minimum, average and maximum chunk size in bytes (casync's
/// `--chunk-size=MIN:AVG:MAX`; default 16 KiB / 64 KiB / 256 KiB).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChunkSizes {
    /// No chunk but the last is shorter (bytes).
    pub min: u64,
    /// The size the discriminator aims at (bytes).
    pub avg: u64,
    /// No chunk is longer (bytes).
    pub max: u64,
}

impl ChunkSizes {
    /// casync's defaults: `CA_CHUNK_SIZE_AVG_DEFAULT` (64 KiB), min avg/4, max avg*4.
    pub const DEFAULT: ChunkSizes = ChunkSizes {
        min: 16 * 1024,
        avg: 64 * 1024,
        max: 256 * 1024,
    };

    /// Checks `WINDOW <= min <= avg <= max <= 128 MiB` (casync's
    /// `CA_CHUNK_SIZE_LIMIT_MAX`; a min below the window would let casync
    /// cut before the window is full, which this chunker does not model).
    /// Errors: a one-line reason.
    pub fn check(&self) -> Result<(), String> {
        let ok = WINDOW as u64 <= self.min
            && self.min <= self.avg
            && self.avg <= self.max
            && self.max <= 128 * 1024 * 1024;
        if ok {
            Ok(())
        } else {
            Err(format!(
                "chunk sizes {}/{}/{}: need {WINDOW} <= min <= avg <= max <= 128 MiB",
                self.min, self.avg, self.max
            ))
        }
    }

    /// The cut discriminator: `CA_CHUNKER_DISCRIMINATOR_FROM_AVG(avg)`
    /// clamped to `min..=max`, as `ca_chunker_set_size` computes it.
    pub fn discriminator(&self) -> u32 {
        let avg = self.avg as f64;
        let d = (avg / (-1.42888852e-7 * avg + 1.33237515)) as u64;
        d.clamp(self.min, self.max).min(u32::MAX as u64) as u32
    }
}

/// The chunker for one set of sizes: where each chunk ends.
#[derive(Debug, Clone, Copy)]
pub struct Chunker {
    min: usize,
    max: usize,
    fixed: bool,
    /// `u64::MAX / d + 1` for the discriminator `d`: `h mod d` and the cut test without a division
    /// (Lemire, Kaser and Kurz, "Faster remainder by direct computation").
    m: u64,
    /// Whether `u32::MAX mod d == d - 1` (the one `h` the cut test's
    /// `h + 1` would overflow for).
    max_hits: bool,
}

impl Chunker {
    /// A chunker for `sizes`. Errors: sizes [`ChunkSizes::check`] refuses.
    pub fn new(sizes: ChunkSizes) -> Result<Chunker, String> {
        sizes.check()?;
        let d = sizes.discriminator();
        Ok(Chunker {
            min: sizes.min as usize,
            max: sizes.max as usize,
            fixed: sizes.min == sizes.avg && sizes.avg == sizes.max,
            m: (u64::MAX / d as u64).wrapping_add(1),
            max_hits: u32::MAX % d == d - 1,
        })
    }

    /// The largest chunk, in bytes.
    pub fn max(&self) -> usize {
        self.max
    }

    /// casync's cut test `h mod d == d - 1`, i.e. `d` divides `h + 1`:
    /// one multiplication (for `n < 2^32`, `d | n` iff `n * m mod 2^64 < m`).
    #[inline(always)]
    fn hits(&self, h: u32) -> bool {
        match h.checked_add(1) {
            Some(n) => (n as u64).wrapping_mul(self.m) < self.m,
            None => self.max_hits,
        }
    }

    /// The length of the chunk that starts at `data[0]`, where `data`
    /// holds at least [`Chunker::max`] bytes or ends where the blob ends
    /// (then a chunk shorter than `min` may end there). 0 only for empty
    /// `data`.
    pub fn cut(&self, data: &[u8]) -> usize {
        let end = data.len().min(self.max);
        if self.fixed || end < self.min {
            return end;
        }
        let mut h = start(&data[self.min - WINDOW..self.min]);
        let mut c = self.min;
        loop {
            if self.hits(h) || c == end {
                return c;
            }
            h = h.rotate_left(1) ^ LEAVE[data[c - WINDOW] as usize] ^ TABLE[data[c] as usize];
            c += 1;
        }
    }
}

/// The buzhash of one full window (`ca_chunker_start`).
fn start(window: &[u8]) -> u32 {
    let n = window.len() as u32;
    window.iter().enumerate().fold(0u32, |h, (i, &b)| {
        h ^ TABLE[b as usize].rotate_left(n - 1 - i as u32)
    })
}

/// Every chunk of a whole blob in memory, as lengths in order (tests and
/// small blobs; streams use [`Chunker::cut`] over a buffer of `max` bytes).
pub fn chunk_lengths(chunker: &Chunker, mut data: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let n = chunker.cut(data);
        out.push(n);
        data = &data[n..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discriminator_of_the_defaults_is_casyncs() {
        // 65536 / (-1.42888852e-7 * 65536 + 1.33237515) = 49535.6..., truncated.
        assert_eq!(ChunkSizes::DEFAULT.discriminator(), 49535);
    }

    #[test]
    fn the_cut_test_is_casyncs_mod() {
        let c = Chunker::new(ChunkSizes::DEFAULT).unwrap();
        let d = ChunkSizes::DEFAULT.discriminator();
        let edges = [
            0u32,
            1,
            d - 1,
            d,
            d + 1,
            2 * d - 1,
            u32::MAX,
            u32::MAX - 1,
            1 << 31,
        ];
        let spread = (0..200_000u32).map(|i| i.wrapping_mul(2654435761));
        for h in edges.into_iter().chain(spread) {
            assert_eq!(c.hits(h), h % d == d - 1, "{h}");
        }
    }

    #[test]
    fn rolling_equals_starting_over() {
        // The shortcut this chunker takes: buzhash depends on the window alone.
        let data: Vec<u8> = (0..500u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let mut h = start(&data[..WINDOW]);
        for c in WINDOW..data.len() {
            h = h.rotate_left(1) ^ LEAVE[data[c - WINDOW] as usize] ^ TABLE[data[c] as usize];
            assert_eq!(h, start(&data[c + 1 - WINDOW..c + 1]), "at {c}");
        }
    }

    #[test]
    fn edges() {
        let c = Chunker::new(ChunkSizes::DEFAULT).unwrap();
        assert!(chunk_lengths(&c, &[]).is_empty());
        assert_eq!(chunk_lengths(&c, &[7; 100]), [100]);
        // Zeros never hit the discriminator: every chunk is max long.
        assert_eq!(
            chunk_lengths(&c, &vec![0; 600 * 1024]),
            [262144, 262144, 90112]
        );
        assert!(
            ChunkSizes {
                min: 8,
                avg: 64,
                max: 256
            }
            .check()
            .is_err()
        );
    }
}
