//! What the whole-loop `asm!` kernels share: the block itself with every vector (and the SVE kernels' predicate)
//! register declared clobbered ([`vector_asm!`], [`sve_asm!`]), zeroing the int32 accumulators z0–z7 and the f32 sums z8–z15, and
//! storing the sums to 8 × 8 f32. Stable Rust has no SVE register types, so an SVE kernel keeps all its state in
//! one asm block; these pieces are its text, spliced in with `concat!`.

/// `asm!` with every vector register clobbered, v0–v31 (d8–d15 are callee-saved, so the compiler saves them
/// around the block), plus the `[...]` operands given first (the SVE kernels' predicates); the flags are
/// clobbered (no `preserves_flags`); no stack use. The NEON asm kernels use it as it is.
macro_rules! vector_asm {
    ([$($extra:tt)*] $($body:tt)*) => {
        core::arch::asm!(
            $($body)*
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _, out("v6") _,
            out("v7") _, out("v8") _, out("v9") _, out("v10") _, out("v11") _, out("v12") _, out("v13") _,
            out("v14") _, out("v15") _, out("v16") _, out("v17") _, out("v18") _, out("v19") _, out("v20") _,
            out("v21") _, out("v22") _, out("v23") _, out("v24") _, out("v25") _, out("v26") _, out("v27") _,
            out("v28") _, out("v29") _, out("v30") _, out("v31") _,
            $($extra)*
            options(nostack),
        )
    };
}
pub(crate) use vector_asm;

/// Runs `$tile!(numerics zp chunks)` for the mode of one call, the whole-loop NEON kernels' compile-time variants of
/// their asm text: numerics `block` | `row` (`$row`), zero points `zp` | `nozp` (`$zp`), one 32-K chunk per block
/// `one` | `many` (`$one`).
macro_rules! asm_modes {
    ($tile:ident; $row:expr, $zp:expr, $one:expr) => {
        $crate::arch::aarch64::sve_asm::asm_modes!($tile; row; $row, $zp, $one)
    };
    // `$rowact`: the row numerics' mode name (`row`, or `rowsum`: running sums, see `qsnbp8x8_tiles::ColumnScales`).
    ($tile:ident; $rowact:ident; $row:expr, $zp:expr, $one:expr) => {
        match ($row, $zp, $one) {
            (false, false, true) => $tile!(block nozp one),
            (false, false, false) => $tile!(block nozp many),
            (false, true, true) => $tile!(block zp one),
            (false, true, false) => $tile!(block zp many),
            (true, false, true) => $tile!($rowact nozp one),
            (true, false, false) => $tile!($rowact nozp many),
            (true, true, true) => $tile!($rowact zp one),
            (true, true, false) => $tile!($rowact zp many),
        }
    };
}
pub(crate) use asm_modes;

/// `movi vN.4s, #0` for each listed register `N`: the NEON asm kernels' zeroing of accumulators and sums.
macro_rules! movi_zero {
    ($($v:literal)+) => {
        concat!($("movi v", $v, ".4s, #0\n",)+)
    };
}
pub(crate) use movi_zero;

/// 64 zero bytes, what the NEON asm tiles restart their int32 block accumulators from: one LD1 of four registers
/// ([`ld1_zero`]) zeroes four accumulators, where MOVI takes one instruction each (and a slot on the vector pipes
/// that the tiles' SMMLA / SDOT are bound by; the loads issue on the load pipes, which the tiles leave mostly idle).
/// An AdvSIMD write also zeroes the Z register's bits above 128, so this serves SVE code too.
#[repr(C, align(64))]
pub(crate) struct Zeros(pub(crate) [u8; 64]);

pub(crate) static ZEROS: Zeros = Zeros([0; 64]);

/// `ld1 {vA.16b - vD.16b}, [{zeros}]` for each listed quadruple of consecutive registers: four accumulators zeroed
/// from [`ZEROS`] (the asm's `zeros` operand) per instruction.
macro_rules! ld1_zero {
    ($([$a:literal $b:literal $c:literal $d:literal])+) => {
        concat!($("ld1 {{v", $a, ".16b, v", $b, ".16b, v", $c, ".16b, v", $d, ".16b}}, [{zeros}]\n",)+)
    };
}
pub(crate) use ld1_zero;

/// The chunk loop inside the block loop of the whole-loop NEON kernels, `head` / `tail` of one mode (`asm_modes!`'s
/// `one` | `many`): blocks of one 32-K chunk have no loop (`{cc}` and `{chunks}` named in a comment only), longer ones
/// count `{chunks}` down in `{cc}` (label 3).
macro_rules! chunk_loop {
    (head one) => {
        "// {cc} {chunks}\n"
    };
    (head many) => {
        concat!("mov {cc}, {chunks}\n", "3:\n")
    };
    (tail one) => {
        ""
    };
    (tail many) => {
        concat!("subs {cc}, {cc}, #1\n", "b.ne 3b\n")
    };
}
pub(crate) use chunk_loop;

/// `asm!` with the SVE kernels' clobbers: z0–z31 (declared as v0–v31, see [`vector_asm!`]) and the predicates
/// p0–p3 they set.
macro_rules! sve_asm {
    ($($body:tt)*) => {
        $crate::arch::aarch64::sve_asm::vector_asm!(
            [out("p0") _, out("p1") _, out("p2") _, out("p3") _,]
            $($body)*
        )
    };
}
pub(crate) use sve_asm;

/// Zeroes the 8 int32 accumulators z0–z7: two NEON LD1 of [`ZEROS`] (the asm's `zeros` operand; an AdvSIMD
/// write zeroes a Z register's bits above 128), where DUP takes one instruction per register.
macro_rules! zero_acc {
    () => {
        $crate::arch::aarch64::sve_asm::ld1_zero!(["0" "1" "2" "3"] ["4" "5" "6" "7"])
    };
}
pub(crate) use zero_acc;

/// Zeroes the 8 f32 sums z8–z15 and the accumulators.
macro_rules! zero_all {
    () => {
        concat!(
            "dup z8.s, #0\n",
            "dup z9.s, #0\n",
            "dup z10.s, #0\n",
            "dup z11.s, #0\n",
            "dup z12.s, #0\n",
            "dup z13.s, #0\n",
            "dup z14.s, #0\n",
            "dup z15.s, #0\n",
            $crate::arch::aarch64::sve_asm::zero_acc!(),
        )
    };
}
pub(crate) use zero_all;

/// Stores the first 256 bits of the sums z8–z15 to `{out}` (64 f32, z8 first) under predicate p1 (`.s, vl8`);
/// `{e8}`, `{e16}`, `{e24}` hold 8, 16, 24; `{out}` is advanced by 128 bytes.
macro_rules! store_sums {
    () => {
        concat!(
            "st1w {{z8.s}}, p1, [{out}]\n",
            "st1w {{z9.s}}, p1, [{out}, {e8}, lsl #2]\n",
            "st1w {{z10.s}}, p1, [{out}, {e16}, lsl #2]\n",
            "st1w {{z11.s}}, p1, [{out}, {e24}, lsl #2]\n",
            "add {out}, {out}, #128\n",
            "st1w {{z12.s}}, p1, [{out}]\n",
            "st1w {{z13.s}}, p1, [{out}, {e8}, lsl #2]\n",
            "st1w {{z14.s}}, p1, [{out}, {e16}, lsl #2]\n",
            "st1w {{z15.s}}, p1, [{out}, {e24}, lsl #2]\n",
        )
    };
}
pub(crate) use store_sums;

/// ZA's lazy save (AAPCS64 SME: what `__arm_tpidr2_save` does) and entering streaming mode with a zeroed ZA:
/// with a TPIDR2 block, ZA's first `num_za_save_slices` array vectors (at most SVL) go to its buffer, then
/// TPIDR2_EL0 = 0; SMSTART does not zero a ZA that is already on (dormant), so `zero {za}` follows it.
macro_rules! enter_streaming {
    () => {
        concat!(
            "mrs x16, tpidr2_el0\n",
            "cbz x16, 3f\n",
            "ldr x17, [x16]\n",
            "ldrh w15, [x16, #8]\n",
            "rdsvl x14, #1\n",
            "cmp x15, x14\n",
            "csel x15, x15, x14, lo\n",
            "mov w12, #0\n",
            "2:\n",
            "cmp x12, x15\n",
            "b.hs 4f\n",
            "str za[w12, 0], [x17]\n",
            "addsvl x17, x17, #1\n",
            "add w12, w12, #1\n",
            "b 2b\n",
            "4:\n",
            "msr tpidr2_el0, xzr\n",
            "3:\n",
            "smstart\n",
            "zero {{za}}\n",
        )
    };
}
pub(crate) use enter_streaming;

/// `asm!` for a streaming-mode block (from [`enter_streaming!`] to `smstop`, no Rust code between): every vector
/// and predicate register and ffr declared clobbered (SMSTART / SMSTOP zero them, d8–d15 included), and
/// `enter_streaming!`'s x12, x14–x17; flags clobbered, no stack use.
macro_rules! streaming_asm {
    ($($body:tt)*) => {
        $crate::arch::aarch64::sve_asm::vector_asm!(
            [out("p0") _, out("p1") _, out("p2") _, out("p3") _, out("p4") _, out("p5") _, out("p6") _,
             out("p7") _, out("p8") _, out("p9") _, out("p10") _, out("p11") _, out("p12") _, out("p13") _,
             out("p14") _, out("p15") _, out("ffr") _,
             out("x12") _, out("x14") _, out("x15") _, out("x16") _, out("x17") _,]
            $($body)*
        )
    };
}
pub(crate) use streaming_asm;
