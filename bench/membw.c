// membw.c - STREAM-like read-only memory bandwidth (sum of a float buffer) with AVX-512 and AVX2,
// 1..T OpenMP threads, best and median of several runs. The physical limit for decode GEMV:
// a memory-bound INT4 GEMV cannot stream its weights faster than this.
//
// Build: gcc -O3 -march=native -fopenmp bench/membw.c -o membw
// Run:   ./membw                       # 1 GiB buffer, threads 1 and 2, AVX-512 and AVX2, 15 runs
//        ./membw -s 1,16,1024 -r 20    # also L2- and L3-sized buffers (MiB), 20 runs
//        ./membw -t 1,2 -i avx512 -k 8     # plus 8 interleaved streams per thread
// Output: one markdown table row per (size, isa, threads): best / median / worst GB/s (1 GB = 1e9 B).
// Each thread sums its own contiguous 1/T of the buffer (first-touched by the same thread); a timing
// covers the whole parallel region. Buffers under 64 MiB are summed several times per timing.
#define _GNU_SOURCE
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static volatile float g_sink;

__attribute__((target("avx512f"))) static float sum_avx512(const float *p, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {  // 512 B per iteration, 8 independent accumulators
        a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
        a4 = _mm512_add_ps(a4, _mm512_load_ps(p + i + 64));
        a5 = _mm512_add_ps(a5, _mm512_load_ps(p + i + 80));
        a6 = _mm512_add_ps(a6, _mm512_load_ps(p + i + 96));
        a7 = _mm512_add_ps(a7, _mm512_load_ps(p + i + 112));
    }
    a0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                       _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    float s = _mm512_reduce_add_ps(a0);
    for (; i < n; i++) s += p[i];
    return s;
}

__attribute__((target("avx2"))) static float sum_avx2(const float *p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {  // 256 B per iteration
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
        a4 = _mm256_add_ps(a4, _mm256_load_ps(p + i + 32));
        a5 = _mm256_add_ps(a5, _mm256_load_ps(p + i + 40));
        a6 = _mm256_add_ps(a6, _mm256_load_ps(p + i + 48));
        a7 = _mm256_add_ps(a7, _mm256_load_ps(p + i + 56));
    }
    a0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                       _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
    h = _mm_hadd_ps(h, h);
    h = _mm_hadd_ps(h, h);
    float s = _mm_cvtss_f32(h);
    for (; i < n; i++) s += p[i];
    return s;
}

// S interleaved streams: the chunk is split into S contiguous parts read side by side (one 64-B line
// from each part per step), which gives the hardware more independent prefetch streams per core.
static int g_streams = 1;
__attribute__((target("avx512f"))) static float sum_avx512_streams(const float *p, size_t n) {
    int S = g_streams;
    size_t part = (n / S) & ~(size_t)31;  // floats per part, multiple of 2 lines
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    for (size_t i = 0; i < part; i += 32)
        for (int s = 0; s < S; s++) {
            const float *q = p + (size_t)s * part + i;
            a0 = _mm512_add_ps(a0, _mm512_load_ps(q));
            a1 = _mm512_add_ps(a1, _mm512_load_ps(q + 16));
        }
    float r = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (size_t i = part * S; i < n; i++) r += p[i];
    return r;
}

typedef float (*sum_fn)(const float *, size_t);

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int parse_list(const char *s, long *out, int max) {
    int n = 0;
    char *dup = strdup(s), *save = NULL;
    for (char *t = strtok_r(dup, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save)) out[n++] = atol(t);
    free(dup);
    return n;
}

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [-s MiB[,MiB..]] [-t threads[,..]] [-r runs] [-i avx512|avx2|both] [-k streams]\n"
            "  defaults: -s 1024 -t 1,2 -r 15 -i both; -k S > 1 adds an avx512 row that reads S\n"
            "  interleaved streams per thread (more memory-level parallelism)\n",
            argv0);
    exit(2);
}

int main(int argc, char **argv) {
    long sizes[16] = {1024}, threads[16] = {1, 2};
    int nsizes = 1, nthreads = 2, runs = 15, opt;
    const char *isa = "both";
    while ((opt = getopt(argc, argv, "s:t:r:i:k:h")) != -1) {
        switch (opt) {
            case 'k': g_streams = atoi(optarg) > 0 ? atoi(optarg) : 1; break;
            case 's': nsizes = parse_list(optarg, sizes, 16); break;
            case 't': nthreads = parse_list(optarg, threads, 16); break;
            case 'r': runs = atoi(optarg); break;
            case 'i': isa = optarg; break;
            default: usage(argv[0]);
        }
    }
    if (nsizes < 1 || nthreads < 1 || runs < 1) usage(argv[0]);
    __builtin_cpu_init();
    int have512 = __builtin_cpu_supports("avx512f"), have2 = __builtin_cpu_supports("avx2");
    printf("# membw: read-only sum, %d runs per row, omp_get_num_procs=%d, avx512f=%d avx2=%d\n", runs,
           omp_get_num_procs(), have512, have2);
    printf("| buffer | isa | threads | best GB/s | median GB/s | worst GB/s |\n|---:|---|---:|---:|---:|---:|\n");
    for (int si = 0; si < nsizes; si++) {
        size_t bytes = (size_t)sizes[si] << 20;
        size_t n = bytes / sizeof(float);
        float *buf = NULL;
        size_t align = 2u << 20;
        if (posix_memalign((void **)&buf, align, (bytes + align - 1) / align * align)) {
            perror("posix_memalign");
            return 1;
        }
        madvise(buf, bytes, MADV_HUGEPAGE);
        int inner = bytes >= (64u << 20) ? 1 : (int)((64u << 20) / bytes);
        for (int ii = 0; ii < 3; ii++) {
            char name[32];
            if (ii == 2) snprintf(name, sizeof name, "avx512 x%d streams", g_streams);
            else snprintf(name, sizeof name, "%s", ii == 0 ? "avx512" : "avx2");
            sum_fn fn = ii == 0 ? sum_avx512 : ii == 1 ? sum_avx2 : sum_avx512_streams;
            if (ii == 2 && (g_streams < 2 || !have512)) continue;
            if (ii < 2 && strcmp(isa, "both") && strcmp(isa, name)) continue;
            if ((ii == 0 && !have512) || (ii == 1 && !have2)) continue;
            for (int ti = 0; ti < nthreads; ti++) {
                int T = (int)threads[ti];
                omp_set_num_threads(T);
                // first touch by the thread that will read the chunk
#pragma omp parallel num_threads(T)
                {
                    int t = omp_get_thread_num();
                    size_t chunk = (n / T) & ~(size_t)127, lo = (size_t)t * chunk;
                    size_t hi = t == T - 1 ? n : lo + chunk;
                    for (size_t i = lo; i < hi; i++) buf[i] = (float)(i & 7) * 0.125f;
                }
                double *gbs = malloc(sizeof(double) * runs);
                float total = 0;
                for (int r = -1; r < runs; r++) {  // r = -1: warm-up
                    double t0 = omp_get_wtime();
#pragma omp parallel num_threads(T) reduction(+ : total)
                    {
                        int t = omp_get_thread_num();
                        size_t chunk = (n / T) & ~(size_t)127, lo = (size_t)t * chunk;
                        size_t hi = t == T - 1 ? n : lo + chunk;
                        for (int k = 0; k < inner; k++) total += fn(buf + lo, hi - lo);
                    }
                    double dt = omp_get_wtime() - t0;
                    if (r >= 0) gbs[r] = (double)bytes * inner / dt / 1e9;
                }
                g_sink = total;
                qsort(gbs, runs, sizeof(double), cmp_double);
                printf("| %ld MiB | %s | %d | %.1f | %.1f | %.1f |\n", sizes[si], name, T, gbs[runs - 1],
                       gbs[runs / 2], gbs[0]);
                fflush(stdout);
                free(gbs);
            }
        }
        free(buf);
    }
    return 0;
}
