//! What the CPU can run, detected once per process, and the instruction-set ladder.

use std::fmt;
use std::sync::OnceLock;

/// Instruction-set rungs, lowest first within each architecture. A kernel is tagged with the one it needs.
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
}

impl Isa {
    pub const ALL: [Isa; 8] =
        [Isa::Portable, Isa::Neon, Isa::Dotprod, Isa::I8mm, Isa::Sve, Isa::Sme, Isa::Avx2, Isa::Avx512Vnni];

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
        }
    }

    pub fn from_name(s: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|i| i.name() == s)
    }

    /// Position on its architecture's ladder (portable = 0).
    pub fn rank(self) -> u32 {
        match self {
            Isa::Portable => 0,
            Isa::Neon | Isa::Avx2 => 1,
            Isa::Dotprod | Isa::Avx512Vnni => 2,
            Isa::I8mm => 3,
            Isa::Sve => 4,
            Isa::Sme => 5,
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The features of this CPU that matter to the kernels.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cpu {
    available: Vec<Isa>,
}

impl Cpu {
    /// This process's CPU, detected once.
    pub fn get() -> &'static Cpu {
        static CPU: OnceLock<Cpu> = OnceLock::new();
        CPU.get_or_init(Cpu::detect)
    }

    /// A CPU with exactly these features (tests).
    pub fn with(isas: &[Isa]) -> Cpu {
        let mut available = vec![Isa::Portable];
        available.extend(isas.iter().copied().filter(|&i| i != Isa::Portable));
        Cpu { available }
    }

    fn detect() -> Cpu {
        Cpu::with(&crate::arch::detect())
    }

    pub fn has(&self, isa: Isa) -> bool {
        self.available.contains(&isa)
    }

    /// Every available rung, portable first.
    pub fn isas(&self) -> &[Isa] {
        &self.available
    }
}
