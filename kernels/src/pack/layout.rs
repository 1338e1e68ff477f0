//! The RHS layout descriptor: everything a kernel reads from packed weights.
//!
//! Columns (output features n) are grouped in panels of `nr`; the last panel is padded with zero columns.
//! Panels follow each other; inside a panel, one record per K-block, in K order, so a kernel walking one panel
//! reads one sequential stream:
//!
//! ```text
//! record(panel, block) = codes      bl·nr·bits/8 bytes
//!                      | scales     nr × f32 | f16 | bf16                    (ScaleType)
//!                      | zp         nr × f32, only if the weights have zero points and the layout stores them:
//!                                   PerBlock: the zero point z (code units, may be fractional)
//!                                   Correction: c = s·(m − z), so that w = v·s + c  (m, v: see Codes)
//!                      | sums       nr × i32 Σ_k∈block v, only if `block_sums` (pad positions hold v = 0)
//! ```
//!
//! # Codes
//! A block is cut into chunks of `C = min(bl, 32)` K values; a chunk is `cpb = 8/bits` lanes of `L = C/cpb`
//! values, and lane `l` lives in bits `l·bits..` of the bytes. Chunk offset `o` → lane `o / L`, position
//! `p = o % L`, byte `(p / kr)·nr·kr + col·kr + p % kr`. So for 4-bit a byte holds k and k+16 (k and k+8 when
//! bl = 16), and each column's `kr` consecutive K values are adjacent: one 32-bit lane of a `vpdpbusd`/`sdot`
//! operand (kr = 4) or one 64-bit `smmla` row (kr = 8) per column, the low field masked with `& 0x0F`, the high
//! one with `& 0xF0` (= 16·field) without any shuffle.
//!
//! The field holds the code q (0..2^bits−1) as the model gives it ([`Codes::Unsigned`], for u8×s8 dot
//! products: VNNI `vpdpbusd`, USDOT) or q − 2^(bits−1) in two's complement ([`Codes::Signed`], the field XOR
//! 2^(bits−1): for s8×s8 SDOT/SMMLA, where `shl #4` / `and #0xF0` of a 4-bit field give 16·v exactly). The
//! value a kernel multiplies is `v` = q (unsigned) or q − m (signed), m = 2^(bits−1); dequantization is
//! `w = (q − z)·s = (v − (z − m_v))·s` with m_v = 0 (unsigned) or m (signed).
//!
//! Zero points: without zero points in the weights nothing is stored and every block has z = m, so a signed
//! layout needs no correction at all and an unsigned one subtracts m·s. `ZpStorage::None` layouts cannot hold
//! weights with zero points.

use crate::problem::{ComputePath, Problem};

/// How a code is stored in its bit field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Codes {
    /// The model's code q, 0..2^bits−1.
    Unsigned,
    /// q − 2^(bits−1) as a two's-complement field (q XOR 2^(bits−1)).
    Signed,
}

/// How block scales are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ScaleType {
    F32,
    /// Rounded to nearest f16: exact for f16 models; on the int8 path otherwise (2^-11 relative, far below the
    /// activation quantization's error). Never for an fp32-path node with f32 scales.
    F16,
    /// Rounded to nearest bf16 (2^-8 relative): exact scales, or the int8 path.
    Bf16,
}

impl ScaleType {
    pub fn bytes(self) -> usize {
        match self {
            ScaleType::F32 => 4,
            ScaleType::F16 | ScaleType::Bf16 => 2,
        }
    }

    /// `s` as stored and read back.
    pub fn round(self, s: f32) -> f32 {
        match self {
            ScaleType::F32 => s,
            ScaleType::F16 => half::f16::from_f32(s).to_f32(),
            ScaleType::Bf16 => half::bf16::from_f32(s).to_f32(),
        }
    }

    /// `src` as stored (`bytes`, [`ScaleType::bytes`] little-endian bytes each) and as read back (`rounded`):
    /// [`ScaleType::write`] and [`ScaleType::round`] for a row at a time, f16 through `half`'s slice conversion.
    pub(crate) fn encode(self, src: &[f32], bytes: &mut [u8], rounded: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        debug_assert!(rounded.len() == src.len() && bytes.len() == src.len() * self.bytes(), "row lengths differ");
        match self {
            ScaleType::F32 => {
                rounded.copy_from_slice(src);
                for (b, s) in bytes.chunks_exact_mut(4).zip(src) {
                    b.copy_from_slice(&s.to_le_bytes());
                }
            }
            ScaleType::F16 => {
                const CHUNK: usize = 256;
                let mut h = [half::f16::ZERO; CHUNK];
                for ((src, rounded), bytes) in
                    src.chunks(CHUNK).zip(rounded.chunks_mut(CHUNK)).zip(bytes.chunks_mut(2 * CHUNK))
                {
                    let h = &mut h[..src.len()];
                    h.convert_from_f32_slice(src);
                    h.convert_to_f32_slice(rounded);
                    for (b, v) in bytes.chunks_exact_mut(2).zip(h.iter()) {
                        b.copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
            ScaleType::Bf16 => {
                for ((b, r), &s) in bytes.chunks_exact_mut(2).zip(rounded.iter_mut()).zip(src) {
                    let v = half::bf16::from_f32(s);
                    b.copy_from_slice(&v.to_le_bytes());
                    *r = v.to_f32();
                }
            }
        }
    }

    /// One value of [`ScaleType::encode`] (what the row conversion is tested against).
    #[cfg(test)]
    pub(crate) fn write(self, s: f32, out: &mut [u8]) {
        match self {
            ScaleType::F32 => out[..4].copy_from_slice(&s.to_le_bytes()),
            ScaleType::F16 => out[..2].copy_from_slice(&half::f16::from_f32(s).to_le_bytes()),
            ScaleType::Bf16 => out[..2].copy_from_slice(&half::bf16::from_f32(s).to_le_bytes()),
        }
    }

    #[inline]
    pub(crate) fn read(self, b: &[u8]) -> f32 {
        match self {
            ScaleType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            ScaleType::F16 => half::f16::from_le_bytes([b[0], b[1]]).to_f32(),
            ScaleType::Bf16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f32(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            ScaleType::F32 => "f32",
            ScaleType::F16 => "f16",
            ScaleType::Bf16 => "bf16",
        }
    }
}

/// How the zero points of weights that have them are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ZpStorage {
    /// Not at all: the layout holds only weights without zero points.
    None,
    /// One f32 zero point per (column, block), in code units.
    PerBlock,
    /// One f32 correction c = s·(m_v − z) per (column, block): w = v·s + c, so a kernel adds c·Σa per block.
    Correction,
}

/// Everything a kernel reads from packed weights. Packing is a function of (weights, layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct RhsLayout {
    /// Columns per panel.
    pub nr: usize,
    /// Consecutive K values per column inside a chunk.
    pub kr: usize,
    pub codes: Codes,
    pub scales: ScaleType,
    pub zero_points: ZpStorage,
    /// Per (column, block) i32 Σ v: for kernels that shift activations (u8 = q + 128) and must take
    /// 128·Σv back out.
    pub block_sums: bool,
}

impl RhsLayout {
    /// Unsigned codes, f32 scales, f32 zero points per block, no sums: the plain layout.
    pub const fn plain(nr: usize, kr: usize) -> RhsLayout {
        RhsLayout {
            nr,
            kr,
            codes: Codes::Unsigned,
            scales: ScaleType::F32,
            zero_points: ZpStorage::PerBlock,
            block_sums: false,
        }
    }

    /// K values per chunk for a block size.
    pub fn chunk(bl: usize) -> usize {
        bl.min(32)
    }

    /// Whether the code geometry can hold blocks of `bl` codes of `bits` bits (each lane of a chunk must be a
    /// whole number of kr-groups).
    pub fn holds_blocks(&self, bits: u32, bl: usize) -> bool {
        if !matches!(bits, 2 | 4 | 8) || bl < 16 || !bl.is_power_of_two() {
            return false;
        }
        let lane = Self::chunk(bl) / (8 / bits as usize);
        self.nr > 0 && self.kr > 0 && lane.is_multiple_of(self.kr)
    }

    /// Whether weights of problem `p` can be packed into this layout without losing what the path promises:
    /// block geometry, zero points, and scale precision (f16/bf16 scales only where exact or on the int8 path).
    pub fn can_hold(&self, p: &Problem) -> bool {
        let scales_ok = match self.scales {
            ScaleType::F32 => true,
            ScaleType::F16 => p.scales_exact_f16 || (p.path == ComputePath::Int8 && p.scales_fit_f16),
            ScaleType::Bf16 => p.scales_exact_bf16 || (p.path == ComputePath::Int8 && p.scales_fit_bf16),
        };
        self.holds_blocks(p.bits, p.block_size) && scales_ok && !(p.zero_points && self.zero_points == ZpStorage::None)
    }

    /// Why [`RhsLayout::can_hold`] is false, for error messages.
    pub fn why_not(&self, p: &Problem) -> Option<String> {
        if !self.holds_blocks(p.bits, p.block_size) {
            return Some(format!("{} cannot hold bits={} block_size={}", self.name(), p.bits, p.block_size));
        }
        if p.zero_points && self.zero_points == ZpStorage::None {
            return Some(format!("{} stores no zero points", self.name()));
        }
        (!self.can_hold(p))
            .then(|| format!("{} scales would lose precision the {} path promises", self.name(), p.path.name()))
    }

    /// Bytes of codes in one record.
    pub fn code_bytes(&self, bits: u32, bl: usize) -> usize {
        bl * self.nr * bits as usize / 8
    }

    /// Byte offsets inside a record: (scales, zero points or corrections, block sums) and the record size.
    /// Absent parts have length zero (their offset is where they would start).
    pub fn record(&self, bits: u32, bl: usize, has_zp: bool) -> RecordLayout {
        let scales = self.code_bytes(bits, bl);
        let zp = scales + self.nr * self.scales.bytes();
        let zp_len = if has_zp && self.zero_points != ZpStorage::None { 4 * self.nr } else { 0 };
        let sums = zp + zp_len;
        let bytes = sums + if self.block_sums { 4 * self.nr } else { 0 };
        RecordLayout { scales, zp, has_zp: zp_len > 0, sums, bytes }
    }

    /// The value m_v subtracted from a code before it is multiplied (0 unsigned, 2^(bits−1) signed).
    pub fn code_offset(&self, bits: u32) -> i32 {
        match self.codes {
            Codes::Unsigned => 0,
            Codes::Signed => 1 << (bits - 1),
        }
    }

    /// The layout's name in kernel/family names and logs: `q{u|s}nbp<nr>x<kr>_s<scale>[_zpb|_zpc][_bsum]`,
    /// e.g. `qunbp8x4_sf32_zpb` (unsigned n-bit codes, panels of 8 columns × 4 K, f32 scales, zero points per
    /// block) or `qsnbp8x8_sf16_zpc_bsum`.
    pub fn name(&self) -> String {
        let codes = match self.codes {
            Codes::Unsigned => "qunb",
            Codes::Signed => "qsnb",
        };
        let zp = match self.zero_points {
            ZpStorage::None => "",
            ZpStorage::PerBlock => "_zpb",
            ZpStorage::Correction => "_zpc",
        };
        let sums = if self.block_sums { "_bsum" } else { "" };
        format!("{codes}p{}x{}_s{}{zp}{sums}", self.nr, self.kr, self.scales.name())
    }
}

impl std::fmt::Display for RhsLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// Byte offsets of the parts of one (panel, block) record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLayout {
    pub scales: usize,
    pub zp: usize,
    /// The record carries zero points (or corrections).
    pub has_zp: bool,
    pub sums: usize,
    pub bytes: usize,
}

/// Byte index inside a record's codes and bit shift of the code at block offset `o` of panel column `col`.
#[inline]
pub fn code_position(layout: &RhsLayout, bits: u32, bl: usize, col: usize, o: usize) -> (usize, u32) {
    let chunk = RhsLayout::chunk(bl);
    let lane_len = chunk / (8 / bits as usize);
    let (c, oc) = (o / chunk, o % chunk);
    let (lane, pos) = (oc / lane_len, oc % lane_len);
    let chunk_bytes = chunk * layout.nr * bits as usize / 8;
    let byte = c * chunk_bytes + (pos / layout.kr) * layout.nr * layout.kr + col * layout.kr + pos % layout.kr;
    (byte, lane as u32 * bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_a_bijection() {
        for bits in [2u32, 4, 8] {
            for bl in [16usize, 32, 64, 128] {
                for (nr, kr) in [(8, 4), (4, 4), (16, 4), (4, 8), (8, 8), (1, 1), (3, 2)] {
                    let layout = RhsLayout::plain(nr, kr);
                    if !layout.holds_blocks(bits, bl) {
                        continue;
                    }
                    let total_bits = bl * layout.nr * bits as usize;
                    let mut seen = vec![false; total_bits];
                    for col in 0..layout.nr {
                        for o in 0..bl {
                            let (byte, shift) = code_position(&layout, bits, bl, col, o);
                            for bit in 0..bits as usize {
                                let idx = byte * 8 + shift as usize + bit;
                                assert!(!seen[idx], "bits={bits} bl={bl} {layout} col={col} o={o}");
                                seen[idx] = true;
                            }
                        }
                    }
                    assert!(seen.iter().all(|&s| s));
                }
            }
        }
    }

    #[test]
    fn four_bit_pairs_k_with_k_plus_16() {
        let l = RhsLayout::plain(4, 4);
        assert_eq!(code_position(&l, 4, 32, 0, 0), (0, 0));
        assert_eq!(code_position(&l, 4, 32, 0, 16), (0, 4));
        assert_eq!(code_position(&l, 4, 32, 1, 3), (7, 0));
        assert_eq!(code_position(&l, 4, 32, 0, 4), (16, 0));
        assert_eq!(code_position(&l, 4, 64, 0, 32), (64, 0));
        assert_eq!(code_position(&l, 4, 16, 0, 8), (0, 4));
    }

    #[test]
    fn names_and_records() {
        let l = RhsLayout {
            nr: 8,
            kr: 8,
            codes: Codes::Signed,
            scales: ScaleType::F16,
            zero_points: ZpStorage::Correction,
            block_sums: true,
        };
        assert_eq!(l.name(), "qsnbp8x8_sf16_zpc_bsum");
        assert_eq!(RhsLayout::plain(8, 4).name(), "qunbp8x4_sf32_zpb");
        let r = l.record(4, 32, true);
        assert_eq!((r.scales, r.zp, r.sums, r.bytes), (128, 144, 176, 208));
        let r = l.record(4, 32, false);
        assert_eq!((r.zp, r.has_zp, r.sums, r.bytes), (144, false, 144, 176));
    }

    #[test]
    fn scale_precision_rules() {
        let mut p = Problem::new(ComputePath::Fp32, 4, 32, false);
        let f16 = RhsLayout { scales: ScaleType::F16, ..RhsLayout::plain(8, 4) };
        assert!(!f16.can_hold(&p), "fp32 path, f32 scales: f16 would lose precision");
        p.scales_exact_f16 = true;
        assert!(f16.can_hold(&p));
        let mut q = Problem::new(ComputePath::Int8, 4, 32, true);
        assert!(f16.can_hold(&q));
        q.scales_fit_f16 = false;
        assert!(!f16.can_hold(&q));
        let none = RhsLayout { zero_points: ZpStorage::None, ..RhsLayout::plain(8, 4) };
        assert!(none.why_not(&Problem::new(ComputePath::Int8, 4, 32, true)).unwrap().contains("no zero points"));
        assert!(RhsLayout::plain(8, 8).why_not(&Problem::new(ComputePath::Int8, 2, 16, false)).is_some());
    }
}
