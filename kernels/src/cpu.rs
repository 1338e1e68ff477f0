//! What the CPU can run, detected once per process: a set of [`Feature`]s, the vector lengths SVE/SME kernels
//! size their tiles by, and the instruction-set ladder ([`Isa`]) that `NIBBLE_ISA` caps.
//!
//! A kernel states the features it needs as a [`Features`] set (e.g. `sve + i8mm`); it is selected, and run
//! through the safe API, only on a CPU whose set contains it. The rungs of the ladder are named feature sets
//! used for `NIBBLE_ISA`, for logs and for kernel names.

use std::fmt;

/// One CPU feature a kernel may need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Feature {
    // aarch64 (HWCAP / HWCAP2 bits)
    Neon,
    Dotprod,
    I8mm,
    Fp16,
    Bf16,
    Sve,
    Sve2,
    /// SVE's SMMLA/UMMLA (HWCAP2_SVEI8MM): only with [`Feature::Sve`].
    SveI8mm,
    Sme,
    /// SME2 (HWCAP2_SME2; macOS FEAT_SME2): only with [`Feature::Sme`].
    Sme2,
    // x86_64
    Avx2,
    Fma,
    F16c,
    Avx512f,
    Avx512bw,
    Avx512vl,
    Avx512Vnni,
    AvxVnni,
    /// AMX-TILE + AMX-INT8 with the tile state enabled by the OS and this process allowed to use it (Linux:
    /// XCR0's XTILECFG/XTILEDATA bits and `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)` granted).
    AmxInt8,
    /// AMX-BF16 (CPUID.(7,0):EDX bit 22), with the same tile state and permission as [`Feature::AmxInt8`].
    AmxBf16,
}

impl Feature {
    pub const ALL: [Feature; 20] = [
        Feature::Neon,
        Feature::Dotprod,
        Feature::I8mm,
        Feature::Fp16,
        Feature::Bf16,
        Feature::Sve,
        Feature::Sve2,
        Feature::SveI8mm,
        Feature::Sme,
        Feature::Sme2,
        Feature::Avx2,
        Feature::Fma,
        Feature::F16c,
        Feature::Avx512f,
        Feature::Avx512bw,
        Feature::Avx512vl,
        Feature::Avx512Vnni,
        Feature::AvxVnni,
        Feature::AmxInt8,
        Feature::AmxBf16,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Feature::Neon => "neon",
            Feature::Dotprod => "dotprod",
            Feature::I8mm => "i8mm",
            Feature::Fp16 => "fp16",
            Feature::Bf16 => "bf16",
            Feature::Sve => "sve",
            Feature::Sve2 => "sve2",
            Feature::SveI8mm => "svei8mm",
            Feature::Sme => "sme",
            Feature::Sme2 => "sme2",
            Feature::Avx2 => "avx2",
            Feature::Fma => "fma",
            Feature::F16c => "f16c",
            Feature::Avx512f => "avx512f",
            Feature::Avx512bw => "avx512bw",
            Feature::Avx512vl => "avx512vl",
            Feature::Avx512Vnni => "avx512vnni",
            Feature::AvxVnni => "avxvnni",
            Feature::AmxInt8 => "amxint8",
            Feature::AmxBf16 => "amxbf16",
        }
    }
}

/// A set of [`Feature`]s (a bit set; `const` so kernel tables can state theirs).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Features(u32);

impl Features {
    pub const NONE: Features = Features(0);

    pub const fn of(list: &[Feature]) -> Features {
        let mut bits = 0;
        let mut i = 0;
        while i < list.len() {
            bits |= 1 << list[i] as u8;
            i += 1;
        }
        Features(bits)
    }

    pub const fn union(self, other: Features) -> Features {
        Features(self.0 | other.0)
    }

    pub const fn intersect(self, other: Features) -> Features {
        Features(self.0 & other.0)
    }

    pub const fn contains(self, other: Features) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn has(self, f: Feature) -> bool {
        self.0 & (1 << f as u8) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn iter(self) -> impl Iterator<Item = Feature> {
        Feature::ALL.into_iter().filter(move |&f| self.has(f))
    }

    /// The features of `self` missing from `have`.
    pub fn missing_from(self, have: Features) -> Features {
        Features(self.0 & !have.0)
    }
}

impl fmt::Display for Features {
    /// `a+b+c`, or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<&str> = self.iter().map(Feature::name).collect();
        f.write_str(&names.join("+"))
    }
}

impl fmt::Debug for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Features({self})")
    }
}

/// The rungs of the instruction-set ladder, lowest first within each architecture. Each rung is a named
/// feature set ([`Isa::features`]); `NIBBLE_ISA=<rung>` restricts kernels to the features of that rung and the
/// ones below it on the same architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Plain Rust, any CPU: the last rung of every ladder.
    Portable,
    // aarch64
    Neon,
    Dotprod,
    I8mm,
    Sve,
    Sme,
    // x86_64
    Avx2,
    Avx512Vnni,
    Amx,
}

impl Isa {
    pub const ALL: [Isa; 9] =
        [Isa::Portable, Isa::Neon, Isa::Dotprod, Isa::I8mm, Isa::Sve, Isa::Sme, Isa::Avx2, Isa::Avx512Vnni, Isa::Amx];

    /// The name used by `NIBBLE_ISA`, in logs and in kernel names.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Neon => "neon",
            Isa::Dotprod => "dotprod",
            Isa::I8mm => "i8mm",
            Isa::Sve => "sve",
            Isa::Sme => "sme",
            Isa::Avx2 => "avx2",
            Isa::Avx512Vnni => "avx512vnni",
            Isa::Amx => "amx",
        }
    }

    pub fn from_name(s: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|i| i.name() == s)
    }

    /// The feature that defines this rung: a CPU without it cannot be capped at this rung.
    pub fn key(self) -> Option<Feature> {
        match self {
            Isa::Portable => None,
            Isa::Neon => Some(Feature::Neon),
            Isa::Dotprod => Some(Feature::Dotprod),
            Isa::I8mm => Some(Feature::I8mm),
            Isa::Sve => Some(Feature::Sve),
            Isa::Sme => Some(Feature::Sme),
            Isa::Avx2 => Some(Feature::Avx2),
            Isa::Avx512Vnni => Some(Feature::Avx512Vnni),
            Isa::Amx => Some(Feature::AmxInt8),
        }
    }

    /// Every feature a kernel at this rung or below it may use: what `NIBBLE_ISA=<this rung>` allows.
    pub const fn features(self) -> Features {
        use Feature::*;
        const NEON: Features = Features::of(&[Neon, Fp16, Bf16]);
        const DOT: Features = NEON.union(Features::of(&[Dotprod]));
        const MM: Features = DOT.union(Features::of(&[I8mm]));
        const SVE: Features = MM.union(Features::of(&[Sve, Sve2, SveI8mm]));
        const SME: Features = SVE.union(Features::of(&[Sme, Sme2]));
        const AVX2: Features = Features::of(&[Avx2, Fma, F16c, AvxVnni]);
        const VNNI: Features = AVX2.union(Features::of(&[Avx512f, Avx512bw, Avx512vl, Avx512Vnni]));
        const AMX: Features = VNNI.union(Features::of(&[AmxInt8, AmxBf16]));
        match self {
            Isa::Portable => Features::NONE,
            Isa::Neon => NEON,
            Isa::Dotprod => DOT,
            Isa::I8mm => MM,
            Isa::Sve => SVE,
            Isa::Sme => SME,
            Isa::Avx2 => AVX2,
            Isa::Avx512Vnni => VNNI,
            Isa::Amx => AMX,
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The features of this CPU that matter to the kernels, and its vector lengths.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cpu {
    features: Features,
    /// SVE vector length in bytes (0 without SVE).
    sve_vl: usize,
    /// SME streaming vector length in bytes (0 without SME).
    sme_svl: usize,
}

impl Cpu {
    /// A CPU with exactly these features (tests, and what [`Cpu::capped`] returns). Vector lengths default to
    /// 16 bytes when SVE/SME are present.
    pub fn with(features: Features) -> Cpu {
        let vl = |f| if features.has(f) { 16 } else { 0 };
        Cpu { features, sve_vl: vl(Feature::Sve), sme_svl: vl(Feature::Sme) }
    }

    /// Sets the vector lengths (bytes); a length for an absent feature is dropped.
    pub fn with_vector_lengths(mut self, sve_vl: usize, sme_svl: usize) -> Cpu {
        self.sve_vl = if self.features.has(Feature::Sve) { sve_vl } else { 0 };
        self.sme_svl = if self.features.has(Feature::Sme) { sme_svl } else { 0 };
        self
    }

    pub fn features(&self) -> Features {
        self.features
    }

    pub fn has(&self, f: Feature) -> bool {
        self.features.has(f)
    }

    /// Whether every feature of `need` is present.
    pub fn supports(&self, need: Features) -> bool {
        self.features.contains(need)
    }

    /// SVE vector length in bytes, if the CPU has SVE.
    pub fn sve_vl(&self) -> Option<usize> {
        (self.sve_vl > 0).then_some(self.sve_vl)
    }

    /// SME streaming vector length in bytes, if the CPU has SME.
    pub fn sme_svl(&self) -> Option<usize> {
        (self.sme_svl > 0).then_some(self.sme_svl)
    }

    /// Whether this CPU can be capped at `isa` (it has the rung's defining feature).
    pub fn has_rung(&self, isa: Isa) -> bool {
        isa.key().is_none_or(|f| self.has(f))
    }

    /// The rungs this CPU has, portable first.
    pub fn rungs(&self) -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|&i| self.has_rung(i)).collect()
    }

    /// This CPU restricted to the features of rung `cap` (what `NIBBLE_ISA=<cap>` leaves).
    pub fn capped(&self, cap: Isa) -> Cpu {
        let features = self.features.intersect(cap.features());
        Cpu { features, ..*self }.with_vector_lengths(self.sve_vl, self.sme_svl)
    }
}

impl fmt::Display for Cpu {
    /// `neon+dotprod+sve (sve vl 64 B)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.features)?;
        if let Some(vl) = self.sve_vl() {
            write!(f, " (sve vl {vl} B)")?;
        }
        if let Some(vl) = self.sme_svl() {
            write!(f, " (sme svl {vl} B)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_and_rungs() {
        let s = Features::of(&[Feature::Sve, Feature::I8mm]);
        assert!(s.has(Feature::Sve) && s.has(Feature::I8mm) && !s.has(Feature::Neon));
        assert_eq!(s.to_string(), "i8mm+sve");
        assert!(Isa::Sve.features().contains(s));
        assert!(!Isa::Dotprod.features().contains(s));
        // Each rung's features include its key and those of the rungs below it on its architecture.
        for isa in Isa::ALL {
            if let Some(k) = isa.key() {
                assert!(isa.features().has(k), "{isa}");
            }
        }
        assert!(Isa::Sme.features().contains(Isa::Neon.features()));
        assert!(Isa::Avx512Vnni.features().contains(Isa::Avx2.features()));
        // a64fx-like: SVE without dotprod; capping at sve keeps neon and sve only.
        let a64fx = Cpu::with(Features::of(&[Feature::Neon, Feature::Fp16, Feature::Sve])).with_vector_lengths(64, 0);
        assert_eq!(a64fx.rungs(), vec![Isa::Portable, Isa::Neon, Isa::Sve]);
        assert_eq!(a64fx.capped(Isa::Neon).features(), Features::of(&[Feature::Neon, Feature::Fp16]));
        assert_eq!(a64fx.capped(Isa::Neon).sve_vl(), None);
        assert_eq!(a64fx.capped(Isa::Sve).sve_vl(), Some(64));
        assert_eq!(a64fx.capped(Isa::Portable).features(), Features::NONE);
    }
}
