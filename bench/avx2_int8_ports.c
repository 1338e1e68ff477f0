// avx2_int8_ports.c - what bounds an AVX2 (no VNNI) int8 GEMM on this core: the issue rate of the instructions
// the `vpmaddubsw` GEMM tile is made of, alone and in the tile's own mix, from L1 (no memory traffic).
//
// Build: gcc -O2 -mavx2 -mfma bench/avx2_int8_ports.c -o target/avx2_int8_ports
// Run:   target/avx2_int8_ports [GHz]     # GHz: the core clock, to print cycles (default 0: G/s only)
// Output: markdown rows, best of 5 timings each.
//
// 1. Single instructions, 12 independent chains each: G instructions per second.
// 2. One 32-K block of the 3 x 16 tile of `matmul_f32_qsi8db_qunbp64x4_sf32_zpc_3x16_avx2` (8 steps of 2 code
//    loads, 3 activation broadcasts, 6 `vpmaddubsw`, 6 `vpaddw` into i16 sums), alone and with its per-block
//    epilogue (per i16 sum: `vpmaddwd` by 1, `vpaddd`, `vcvtdq2ps`, `vmulps` of the two scales, `vfmadd231ps` into
//    the f32 sums), and the block plus 12 of one epilogue instruction, to price each: cycles per block at GHz.
// The i16 sums start from the block's first products (no dependency on the previous block), as in the kernel.
// Floating-point operands are normal numbers (a denormal input costs a microcode assist on this core).
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CLOBBER                                                                                                    \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",      \
        "xmm13", "xmm14", "xmm15", "memory"

// 1. One instruction on 12 independent registers (sources ymm14, ymm15).
#define ON12(op) op("0") op("1") op("2") op("3") op("4") op("5") op("6") op("7") op("8") op("9") op("10") op("11")
#define I_MADDUBSW(r) "vpmaddubsw %%ymm14, %%ymm15, %%ymm" r "\n\t"
#define I_MADDWD(r) "vpmaddwd %%ymm14, %%ymm15, %%ymm" r "\n\t"
#define I_FMA(r) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" r "\n\t"
#define I_PADDW(r) "vpaddw %%ymm14, %%ymm" r ", %%ymm" r "\n\t"

// 2. A 4-K step of the 3 x 16 tile: codes (2 vectors) at %0 + 64·o, activations of 3 rows at %1 + 4·o + 256·r.
#define STEP_FIRST(o)                                                                                              \
    "vmovdqa " #o "*64(%0), %%ymm12\n\t vmovdqa " #o "*64+32(%0), %%ymm13\n\t"                                       \
    "vpbroadcastd " #o "*4(%1), %%ymm14\n\t"                                                                        \
    "vpmaddubsw %%ymm14, %%ymm12, %%ymm0\n\t vpmaddubsw %%ymm14, %%ymm13, %%ymm1\n\t"                                \
    "vpbroadcastd " #o "*4+256(%1), %%ymm14\n\t"                                                                    \
    "vpmaddubsw %%ymm14, %%ymm12, %%ymm2\n\t vpmaddubsw %%ymm14, %%ymm13, %%ymm3\n\t"                                \
    "vpbroadcastd " #o "*4+512(%1), %%ymm14\n\t"                                                                    \
    "vpmaddubsw %%ymm14, %%ymm12, %%ymm4\n\t vpmaddubsw %%ymm14, %%ymm13, %%ymm5\n\t"
#define STEP_ROW(o, r, g0, g1)                                                                                      \
    "vpbroadcastd " #o "*4+" #r "(%1), %%ymm14\n\t"                                                                 \
    "vpmaddubsw %%ymm14, %%ymm12, %%ymm15\n\t vpaddw %%ymm15, %%ymm" g0 ", %%ymm" g0 "\n\t"                         \
    "vpmaddubsw %%ymm14, %%ymm13, %%ymm15\n\t vpaddw %%ymm15, %%ymm" g1 ", %%ymm" g1 "\n\t"
#define STEP(o)                                                                                                    \
    "vmovdqa " #o "*64(%0), %%ymm12\n\t vmovdqa " #o "*64+32(%0), %%ymm13\n\t" STEP_ROW(o, 0, "0", "1")             \
        STEP_ROW(o, 256, "2", "3") STEP_ROW(o, 512, "4", "5")
#define BLOCK STEP_FIRST(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7)

// The per-block epilogue of i16 sums ymm0..5 into f32 sums ymm6..11 (ones at %1 + 1024, the -m·Σq term at
// + 1056, the column scales at + 1088, the row scale at + 1120).
#define EPI1(r, f)                                                                                                 \
    "vpmaddwd 1024(%1), %%ymm" r ", %%ymm15\n\t vpaddd 1056(%1), %%ymm15, %%ymm15\n\t"                              \
    "vcvtdq2ps %%ymm15, %%ymm15\n\t vmovaps 1088(%1), %%ymm14\n\t vmulps 1120(%1), %%ymm14, %%ymm14\n\t"             \
    "vfmadd231ps %%ymm15, %%ymm14, %%ymm" f "\n\t"
// The f32 sums restart at 0 per body (zero idioms: no execution pipe), so that no denormal ever appears.
#define ZERO_F32 "vxorps %%ymm6, %%ymm6, %%ymm6\n\t vxorps %%ymm7, %%ymm7, %%ymm7\n\t vxorps %%ymm8, %%ymm8, %%ymm8\n\t" \
    "vxorps %%ymm9, %%ymm9, %%ymm9\n\t vxorps %%ymm10, %%ymm10, %%ymm10\n\t vxorps %%ymm11, %%ymm11, %%ymm11\n\t"
#define EPILOGUE ZERO_F32 EPI1("0", "6") EPI1("1", "7") EPI1("2", "8") EPI1("3", "9") EPI1("4", "10") EPI1("5", "11")
// 12 of one epilogue instruction, reading the i16 sums.
#define X_MADDWD(r) "vpmaddwd 1024(%1), %%ymm" r ", %%ymm15\n\t"
#define X_PADDD(r) "vpaddd 1056(%1), %%ymm" r ", %%ymm15\n\t"
#define X_CVT(r) "vcvtdq2ps %%ymm" r ", %%ymm15\n\t"
#define X_MULPS(r) "vmulps 1088(%1), %%ymm6, %%ymm15\n\t"
#define X_ADDPS(r) "vaddps 1088(%1), %%ymm6, %%ymm15\n\t"
#define X_BCAST(r) "vpbroadcastd %%xmm" r ", %%ymm15\n\t"
// The widening without `vpmaddwd`: the two i16 halves of each 32-bit lane sign-extended by shifts, then added.
#define X_SHIFTADD(r)                                                                                              \
    "vpslld $16, %%ymm" r ", %%ymm15\n\t vpsrad $16, %%ymm15, %%ymm15\n\t vpsrad $16, %%ymm" r ", %%ymm14\n\t"     \
    "vpaddd %%ymm14, %%ymm15, %%ymm15\n\t"
#define SIX(op) op("0") op("1") op("2") op("3") op("4") op("5")
#define TWELVE(op) SIX(op) SIX(op)

static double ghz;
static char *codes, *act;

#define TIME(label, per, n, text)                                                                                  \
    do {                                                                                                           \
        double best = 1e30;                                                                                        \
        for (int rep = 0; rep < 5; rep++) {                                                                        \
            double t0 = now();                                                                                     \
            for (long i = 0; i < (n); i++)                                                                         \
                __asm__ volatile(text ::"r"(codes), "r"(act) : CLOBBER);                                           \
            double dt = now() - t0;                                                                                \
            if (dt < best) best = dt;                                                                              \
        }                                                                                                          \
        if (ghz > 0)                                                                                               \
            printf("| %s | %.2f G/s | %.1f |\n", label, (per) * (double)(n) / best / 1e9, best * ghz * 1e9 / (n));   \
        else                                                                                                       \
            printf("| %s | %.2f G/s | |\n", label, (per) * (double)(n) / best / 1e9);                              \
    } while (0)

int main(int argc, char **argv) {
    ghz = argc > 1 ? atof(argv[1]) : 0;
    codes = aligned_alloc(64, 4096);
    act = aligned_alloc(64, 4096);
    for (int i = 0; i < 4096; i++) {
        codes[i] = i & 15;
        act[i] = (char)(i * 7);
    }
    // The epilogue's operands: i16 ones, an int32 term, f32 scales (normal numbers: no denormal assists).
    for (int i = 0; i < 16; i++) ((short *)(act + 1024))[i] = 1;
    for (int i = 0; i < 8; i++) {
        ((int *)(act + 1056))[i] = -1000;
        ((float *)(act + 1088))[i] = 0.01f;
        ((float *)(act + 1120))[i] = 0.5f;
    }
    __asm__ volatile("vpxor %%ymm14, %%ymm14, %%ymm14\n\t vpxor %%ymm15, %%ymm15, %%ymm15" ::: "xmm14", "xmm15");
    printf("| what | rate (instructions, or the first instruction of the mix) | cycles per loop body |\n|---|---:|---:|\n");
    long n = 20000000;
    TIME("vpmaddubsw ymm x12", 12, n, ON12(I_MADDUBSW));
    TIME("vpmaddwd ymm x12", 12, n, ON12(I_MADDWD));
    TIME("vfmadd231ps ymm x12", 12, n, ON12(I_FMA));
    TIME("vpaddw ymm x12", 12, n, ON12(I_PADDW));
    long nb = 4000000;
    TIME("3x16 block (48 vpmaddubsw)", 48, nb, BLOCK);
    TIME("3x16 block + epilogue", 48, nb, BLOCK EPILOGUE);
    TIME("3x16 block + 12 vpmaddwd", 48, nb, BLOCK TWELVE(X_MADDWD));
    TIME("3x16 block + 12 vpaddd", 48, nb, BLOCK TWELVE(X_PADDD));
    TIME("3x16 block + 12 vcvtdq2ps", 48, nb, BLOCK TWELVE(X_CVT));
    TIME("3x16 block + 12 vmulps", 48, nb, ZERO_F32 BLOCK TWELVE(X_MULPS));
    TIME("3x16 block + 12 vaddps", 48, nb, ZERO_F32 BLOCK TWELVE(X_ADDPS));
    TIME("3x16 block + 12 vpbroadcastd from xmm", 48, nb, BLOCK TWELVE(X_BCAST));
    TIME("3x16 block + 12 widenings by shifts and adds (48 instructions)", 48, nb, BLOCK TWELVE(X_SHIFTADD));
    return 0;
}
