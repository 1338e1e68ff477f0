//! Packed weights shared across sessions: one packed copy per distinct weight set in the process.
//!
//! Two sessions of one model (a server with a session per tenant, a warm standby, A/B traffic) would otherwise
//! each pack and hold the same weights. ORT's own cross-session mechanism (a prepacked-weights container with
//! `AddInitializer`-shared initializers) only serves nodes of its CPU execution provider, so neither of our
//! frontends can use it; this cache serves both. A weight set is identified by the selected family (which fixes
//! the layout), the shape attributes and a 128-bit XXH3 digest of everything the packing reads (B, scales, zero
//! points, g_idx); the cache holds weak references, so packed weights die with the last session using them.
#![deny(unsafe_code)]

use crate::status::Result;
use nibble_kernels::{PackedRhs, Selected, Weights, ZeroPoints};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use xxhash_rust::xxh3::Xxh3;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    family: &'static str,
    layout: String,
    k: usize,
    n: usize,
    bits: u32,
    block_size: usize,
    digest: u128,
}

static CACHE: LazyLock<Mutex<HashMap<Key, Weak<PackedRhs>>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// Where a node's packed weights came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Packed for this node.
    Packed,
    /// Already packed for another node or session in this process: shared, not packed again.
    Shared,
}

/// The packed weights of `w` for `sel`: the live copy another node or session already made, or a new one.
pub fn packed(sel: &Selected, w: &Weights<'_>) -> Result<(Arc<PackedRhs>, Origin)> {
    let key = key(sel, w);
    if let Some(rhs) = lock().get(&key).and_then(Weak::upgrade) {
        return Ok((rhs, Origin::Shared));
    }
    // Pack without holding the lock (packing a large matrix takes a while and uses several threads); two
    // sessions racing on one weight set both pack, and the second keeps the first's copy.
    let rhs = Arc::new(sel.pack_rhs(w)?);
    let mut cache = lock();
    if let Some(existing) = cache.get(&key).and_then(Weak::upgrade) {
        return Ok((existing, Origin::Shared));
    }
    cache.retain(|_, v| v.strong_count() > 0);
    cache.insert(key, Arc::downgrade(&rhs));
    Ok((rhs, Origin::Packed))
}

/// The number of live shared weight sets (tests and diagnostics).
pub fn live_entries() -> usize {
    lock().values().filter(|v| v.strong_count() > 0).count()
}

fn lock() -> std::sync::MutexGuard<'static, HashMap<Key, Weak<PackedRhs>>> {
    // A panic while holding the lock cannot leave the map inconsistent (single inserts/removals).
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

fn key(sel: &Selected, w: &Weights<'_>) -> Key {
    let mut h = Xxh3::new();
    bytes_part(&mut h, b'B', w.b);
    words_part(&mut h, b'S', w.scales.iter().map(|x| x.to_bits().to_le_bytes()));
    match w.zero_points {
        ZeroPoints::Default => bytes_part(&mut h, b'd', &[]),
        ZeroPoints::Packed(z) => bytes_part(&mut h, b'z', z),
        ZeroPoints::Float(z) => words_part(&mut h, b'f', z.iter().map(|x| x.to_bits().to_le_bytes())),
    }
    match w.g_idx {
        None => bytes_part(&mut h, b'n', &[]),
        Some(g) => words_part(&mut h, b'g', g.iter().map(|v| v.to_le_bytes())),
    }
    let p = w.params;
    Key {
        family: sel.name(),
        layout: sel.layout().to_string(),
        k: p.k,
        n: p.n,
        bits: p.bits,
        block_size: p.block_size,
        digest: h.digest128(),
    }
}

/// One part of the digest: a tag, the length, the bytes (so no two part sequences hash alike).
fn bytes_part(h: &mut Xxh3, tag: u8, bytes: &[u8]) {
    h.update(&[tag]);
    h.update(&(bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

/// A part of 4-byte numbers (little-endian), fed through a small buffer rather than a copy of the array.
fn words_part(h: &mut Xxh3, tag: u8, words: impl ExactSizeIterator<Item = [u8; 4]>) {
    h.update(&[tag]);
    h.update(&((words.len() * 4) as u64).to_le_bytes());
    let mut buf = [0u8; 4096];
    let mut n = 0;
    for word in words {
        buf[n..n + 4].copy_from_slice(&word);
        n += 4;
        if n == buf.len() {
            h.update(&buf);
            n = 0;
        }
    }
    h.update(&buf[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use nibble_kernels::{ComputePath, Params, Problem};

    fn weights<'a>(b: &'a [u8], scales: &'a [f32]) -> Weights<'a> {
        let p = Params::new(64, 8, 4, 32).unwrap();
        Weights::new(p, b, scales, ZeroPoints::Default, None).unwrap()
    }

    #[test]
    fn equal_weights_share_one_copy_and_different_ones_do_not() {
        let b: Vec<u8> = (0..8 * 2 * 16).map(|i| (i * 7 % 256) as u8).collect();
        let s: Vec<f32> = (0..16).map(|i| 0.01 * (i + 1) as f32).collect();
        let w1 = weights(&b, &s);
        let sel = nibble_kernels::select(&Problem::of(ComputePath::Int8, &w1)).unwrap();
        let (r1, o1) = packed(&sel, &w1).unwrap();
        let (r2, o2) = packed(&sel, &weights(&b, &s)).unwrap();
        assert_eq!((o1, o2), (Origin::Packed, Origin::Shared));
        assert!(Arc::ptr_eq(&r1, &r2));
        let mut s2 = s.clone();
        s2[3] = -s2[3];
        let (r3, o3) = packed(&sel, &weights(&b, &s2)).unwrap();
        assert_eq!(o3, Origin::Packed);
        assert!(!Arc::ptr_eq(&r1, &r3));
        // The cache holds no strong reference: dropping every user frees the copy, and the next packs anew.
        drop((r1, r2));
        let (_r4, o4) = packed(&sel, &weights(&b, &s)).unwrap();
        assert_eq!(o4, Origin::Packed);
    }
}
