/* qemu-exec-count.c: count executed guest instructions from a qemu-aarch64 exec log, for qemus that cannot load
 * the TCG plugin (qemu-icount-plugin.c): Debian's static qemu-user 11 has no plugin support.
 * qemu runs with  -d nochain,exec,in_asm,strace -D FIFO [-one-insn-per-tb]  and this program reads FIFO (stdin):
 *   - in_asm: each translation block (TB) prints its instructions ("0xADDR:  ENCODING  disassembly" lines after
 *     "IN: symbol", ended by a blank line) when it is translated, before it first executes: the counter keeps, per
 *     guest pc, the length and the per-filter counts of the TB last translated there;
 *   - exec + nochain: every TB execution goes through qemu's main loop and writes one "Trace ..." line with its
 *     guest pc: the counter adds that TB's counts (as the plugin, which counts a TB when it is entered);
 *   - strace puts each system call in the same stream, so the marker lseek(fd, 0x4e49424c0000 | 1 or | 2,
 *     SEEK_SET) (provider/examples/run_matmul.rs) is seen in order with the instructions.
 *   With -one-insn-per-tb every TB holds one instruction (one Trace line per instruction: no reliance on in_asm
 *   lengths; ~3x slower: 0.6 against ~2 M instructions/s on a shared Zen 3).
 * Prints the same lines as the plugin: "icount total N", "icount enc NAME N", "icount sym S N",
 * "icount marked regions R" [, "icount marked open 1"], "icount marked total N", "icount marked enc NAME N", ...
 * (and "icount marked1 ..." etc. for slots 1-3: codes 3/4, 5/6, 7/8),
 * plus "icount lines L" and "icount seconds S" (log lines read and wall time) on stderr.
 * Args: enc=NAME|0xMASK/0xVALUE (presets as in the plugin; needs in_asm in -d), sym=SUBSTR (the symbol qemu
 * prints on the Trace line), out=FILE (default stdout), pcs=FILE: the instructions executed inside slot 0's marked
 * regions per TB start pc ("pc N" lines, hex pc) plus the strace lines of openat and mmap ("# ..."), from which
 * scripts/aarch64/pc-profile.py finds the libraries' load addresses and names the functions (qemu's Trace line
 * names symbols of the main executable only, not of dlopen'ed libraries). Unknown plugin args (inline=,
 * syscalls=) are ignored.
 * Build: gcc -O2 -o qemu-exec-count qemu-exec-count.c
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#define MAXF 16
enum { F_SYM, F_ENC };
static struct { int kind; char *pat; uint32_t mask, value; uint64_t count; } filt[MAXF];
#include "icount-presets.h"
static int nfilt, nenc;
#define ICOUNT_MARK 0x4e49424c0000ULL

/* pc -> TB counts (n instructions, per filter), open addressing (pc 0 = empty). */
typedef struct { uint32_t n; uint32_t m[MAXF]; uint64_t ex; } Tb;   /* ex: instructions run in marked slot 0 */
static uint64_t *hk; static Tb *hv; static size_t hcap, hn;
static size_t hslot(uint64_t pc)
{
    size_t i = (size_t)((pc >> 2) * 0x9E3779B97F4A7C15ULL) & (hcap - 1);
    while (hk[i] && hk[i] != pc) i = (i + 1) & (hcap - 1);
    return i;
}
static void hput(uint64_t pc, const Tb *tb)
{
    if (2 * (hn + 1) > hcap) {
        uint64_t *ok = hk; Tb *ov = hv; size_t oc = hcap;
        hcap = hcap ? 2 * hcap : 1 << 16;
        hk = calloc(hcap, sizeof(*hk)); hv = calloc(hcap, sizeof(*hv));
        if (!hk || !hv) { fprintf(stderr, "qemu-exec-count: out of memory\n"); exit(2); }
        for (size_t j = 0; j < oc; j++) if (ok[j]) { size_t s = hslot(ok[j]); hk[s] = ok[j]; hv[s] = ov[j]; }
        free(ok); free(ov);
    }
    size_t s = hslot(pc);
    uint64_t ex = hk[s] ? hv[s].ex : 0;        /* a TB translated again keeps its pc's executed count */
    if (!hk[s]) { hk[s] = pc; hn++; }
    hv[s] = *tb;
    hv[s].ex = ex;
}

/* Marked regions: code 2s + 1 opens and 2s + 2 closes one of slot s's (NSLOT independent sums, as the plugin). */
#define NSLOT 4
static uint64_t total, lines, unknown_tbs, mark_regions[NSLOT], mark_start[NSLOT][MAXF + 1], marked[NSLOT][MAXF + 1];
static int mark_open[NSLOT];
static FILE *pcs;                                /* pcs=FILE */
static void snapshot(uint64_t *v) { v[0] = total; for (int i = 0; i < nfilt; i++) v[1 + i] = filt[i].count; }

static int hexval(int c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; }
static uint64_t parse_hex(const char **p, const char *e)
{
    uint64_t v = 0; int d;
    while (*p < e && (d = hexval(**p)) >= 0) { v = v * 16 + d; (*p)++; }
    return v;
}

/* "Trace N: HOSTPTR [FLAGS/PC/...] SYMBOL" */
static void on_trace(const char *s, const char *e)
{
    const char *p = memchr(s, '[', e - s);
    uint64_t pc = 0;
    if (p) { p = memchr(p, '/', e - p); if (p) { p++; pc = parse_hex(&p, e); } }
    Tb *tb = NULL;
    if (hcap) { size_t sl = hslot(pc); if (hk[sl]) tb = &hv[sl]; }
    if (!tb) { unknown_tbs++; total++; return; }   /* never seen translated: count one instruction */
    total += tb->n;
    if (mark_open[0]) tb->ex += tb->n;
    for (int i = 0; i < nfilt; i++) {
        if (filt[i].kind == F_ENC) filt[i].count += tb->m[i];
        else {
            const char *q = p ? memchr(p, ']', e - p) : NULL;
            if (q && memmem(q, e - q, filt[i].pat, strlen(filt[i].pat))) filt[i].count += tb->n;
        }
    }
}

/* strace: "PID lseek(FD,OFFSET,SEEK_SET) = ..." */
static void on_lseek(const char *p, const char *e)
{
    p += 6;                                    /* past "lseek(" */
    const char *c = memchr(p, ',', e - p);
    if (!c) return;
    p = c + 1;
    uint64_t off = 0;
    if (p < e && *p == '-') return;
    while (p < e && *p >= '0' && *p <= '9') off = off * 10 + (uint64_t)(*p++ - '0');
    if (e - p < 9 || memcmp(p, ",SEEK_SET", 9) != 0) return;
    if ((off & ~0xffffULL) != ICOUNT_MARK) return;
    uint64_t now[MAXF + 1], code = off & 0xffff, slot = (code - 1) / 2;
    if (code == 0 || slot >= NSLOT) return;
    snapshot(now);
    if (code % 2 == 1 && !mark_open[slot]) { memcpy(mark_start[slot], now, sizeof(now)); mark_open[slot] = 1; }
    else if (code % 2 == 0 && mark_open[slot]) {
        for (int i = 0; i <= nfilt; i++) marked[slot][i] += now[i] - mark_start[slot][i];
        mark_regions[slot]++; mark_open[slot] = 0;
    }
}

/* in_asm: "IN: sym", then "0xADDR:  ENCODING  disassembly" per instruction, then a blank line. */
static int in_tb; static uint64_t tb_pc; static Tb cur;
static void end_tb(void) { if (in_tb && cur.n) hput(tb_pc, &cur); in_tb = 0; }
static void on_asm(const char *s, const char *e)
{
    const char *p = s + 2;
    uint64_t pc = parse_hex(&p, e);
    if (p >= e || *p != ':') return;
    p++;
    while (p < e && *p == ' ') p++;
    const char *q = p;
    uint32_t w = (uint32_t)parse_hex(&p, e);
    if (p - q != 8) return;
    if (!in_tb) return;
    if (!cur.n) tb_pc = pc;
    cur.n++;
    for (int i = 0; i < nfilt; i++)
        if (filt[i].kind == F_ENC && (w & filt[i].mask) == filt[i].value) cur.m[i]++;
}

static void line(const char *s, const char *e)
{
    lines++;
    if (e - s > 6 && s[0] == 'T' && memcmp(s, "Trace ", 6) == 0) { end_tb(); on_trace(s, e); return; }
    if (e - s > 2 && s[0] == '0' && s[1] == 'x') { on_asm(s, e); return; }
    if (e - s >= 3 && memcmp(s, "IN:", 3) == 0) { end_tb(); memset(&cur, 0, sizeof(cur)); in_tb = 1; return; }
    if (e == s) { end_tb(); return; }
    if (s[0] >= '0' && s[0] <= '9') {          /* strace lines start with the pid */
        const char *p = s;
        while (p < e && *p >= '0' && *p <= '9') p++;
        if (e - p > 7 && memcmp(p, " lseek(", 7) == 0) on_lseek(p + 1, e);
        else if (pcs && ((e - p > 8 && memcmp(p, " openat(", 8) == 0) || (e - p > 6 && memcmp(p, " mmap(", 6) == 0)))
            fprintf(pcs, "# %.*s\n", (int)(e - s), s);
    }
}

int main(int argc, char **argv)
{
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) { fprintf(stderr, "qemu-exec-count: bad arg %s\n", argv[i]); return 2; }
        size_t kl = eq - argv[i]; const char *v = eq + 1;
        if (kl == 3 && !strncmp(argv[i], "sym", 3)) {
            if (nfilt == MAXF) { fprintf(stderr, "qemu-exec-count: too many filters\n"); return 2; }
            filt[nfilt].kind = F_SYM; filt[nfilt].pat = strdup(v); nfilt++;
        } else if (kl == 3 && !strncmp(argv[i], "enc", 3)) {
            if (nfilt == MAXF) { fprintf(stderr, "qemu-exec-count: too many filters\n"); return 2; }
            int found = 0;
            for (size_t k = 0; k < sizeof(presets) / sizeof(presets[0]); k++)
                if (!strcmp(presets[k].name, v)) { filt[nfilt].mask = presets[k].mask; filt[nfilt].value = presets[k].value; found = 1; }
            if (!found && sscanf(v, "%" SCNx32 "/%" SCNx32, &filt[nfilt].mask, &filt[nfilt].value) != 2) {
                fprintf(stderr, "qemu-exec-count: enc=%s: not a preset nor 0xMASK/0xVALUE\n", v); return 2;
            }
            filt[nfilt].kind = F_ENC; filt[nfilt].pat = strdup(v); nfilt++; nenc++;
        } else if (kl == 3 && !strncmp(argv[i], "out", 3)) {
            out = v;
        } else if (kl == 3 && !strncmp(argv[i], "pcs", 3)) {
            if (!(pcs = fopen(v, "w"))) { perror(v); return 2; }
        } else if ((kl == 6 && !strncmp(argv[i], "inline", 6)) || (kl == 8 && !strncmp(argv[i], "syscalls", 8))) {
            /* plugin-only options: nothing to do here */
        } else { fprintf(stderr, "qemu-exec-count: unknown arg %s\n", argv[i]); return 2; }
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* qemu flushes its log after every record (a write per line): a large pipe and a reader that waits for it to
     * fill spare the reader a wake-up per line. */
#ifdef F_SETPIPE_SZ
    fcntl(0, F_SETPIPE_SZ, 1 << 20);
#endif
    size_t cap = 1 << 22, len = 0;
    char *buf = malloc(cap);
    if (!buf) return 2;
    for (;;) {
        ssize_t r = read(0, buf + len, cap - len);
        if (r < 0) { perror("qemu-exec-count: read"); return 2; }
        if (r == 0) break;
        len += r;
        if (r < (1 << 16)) { struct timespec ts = {0, 2000000}; nanosleep(&ts, NULL); }
        char *s = buf, *e = buf + len, *nl;
        while ((nl = memchr(s, '\n', e - s))) { line(s, nl); s = nl + 1; }
        len = e - s;
        memmove(buf, s, len);
        if (len == cap) { cap *= 2; buf = realloc(buf, cap); if (!buf) return 2; }
    }
    if (len) line(buf, buf + len);
    end_tb();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;

    FILE *f = out ? fopen(out, "w") : stdout;
    if (!f) { perror(out); return 2; }
    fprintf(f, "icount total %" PRIu64 "\n", total);
    for (int i = 0; i < nfilt; i++)
        fprintf(f, "icount %s %s %" PRIu64 "\n", filt[i].kind == F_SYM ? "sym" : "enc", filt[i].pat, filt[i].count);
    for (int s = 0; s < NSLOT; s++) {
        char name[16];   /* slot 0: "marked", slot s > 0: "markedS" */
        if (!mark_regions[s] && !mark_open[s]) continue;
        snprintf(name, sizeof(name), s ? "marked%d" : "marked", s);
        fprintf(f, "icount %s regions %" PRIu64 "\n", name, mark_regions[s]);
        if (mark_open[s]) fprintf(f, "icount %s open 1\n", name);
        fprintf(f, "icount %s total %" PRIu64 "\n", name, marked[s][0]);
        for (int i = 0; i < nfilt; i++)
            fprintf(f, "icount %s %s %s %" PRIu64 "\n", name, filt[i].kind == F_SYM ? "sym" : "enc", filt[i].pat,
                    marked[s][1 + i]);
    }
    if (f != stdout) fclose(f);
    if (pcs) {
        for (size_t j = 0; j < hcap; j++)
            if (hk[j] && hv[j].ex) fprintf(pcs, "%" PRIx64 " %" PRIu64 "\n", hk[j], hv[j].ex);
        fclose(pcs);
    }
    fprintf(stderr, "qemu-exec-count: %" PRIu64 " lines in %.1f s (%.2f M lines/s), %" PRIu64 " instructions"
            " (%.2f M/s), %" PRIu64 " TB executions without a translation seen\n",
            lines, secs, secs > 0 ? lines / secs / 1e6 : 0.0, total, secs > 0 ? total / secs / 1e6 : 0.0, unknown_tbs);
    if (unknown_tbs) fprintf(f == stdout ? stderr : stderr, "qemu-exec-count: WARNING: qemu ran without in_asm?\n");
    return 0;
}
