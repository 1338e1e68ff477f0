#!/usr/bin/env python3
"""bench_matmulnbits.py - time INT4 MatMulNBits against fp32 MatMul in onnxruntime (CPU EP).

Builds single-node ONNX models in memory (onnx.helper), one InferenceSession per
(variant, threads), and times session.run_with_iobinding (pre-bound input and
output OrtValues, so the Python overhead per call is a few us; see "call overhead"
in the header it prints).

Variants (the bs/zp/acc flags pick them):
  q4-bs{32,128}-{sym,asym}-acc{4,0}   com.microsoft::MatMulNBits, bits=4. sym: no
                                      zero_points input (default zp 8). asym:
                                      packed uint8 zero_points. acc4: int8
                                      compute. acc0: fp32 compute.
  fp32-matmul                         plain ONNX MatMul, A[M,K] x W[K,N], where W
                                      is the dequantized weight (the "FP32 baseline").
  custom:<q4 variant>                 with --library PATH --domain D: the same node
                                      (same attributes, same inputs) in domain D,
                                      run in a session that registered PATH through
                                      so.register_custom_ops_library. Its ratio to the
                                      built-in twin is printed ("vs builtin").

--dtype float32,float16 runs every case once per dtype. float16: A, scales and Y of
MatMulNBits are float16 (type T = float16; the node has no bias input in either
dtype); the weights are the same codes, the scales are the fp32 scales rounded to
fp16. There is no fp16 MatMul baseline: onnxruntime's CPU EP has no float16 MatMul
kernel here (it wraps an fp32 MatMul in Casts), so fp32-matmul runs for float32
only and "x fp32" is empty on float16 rows. The dtype is a column of the tables
(shown when a dtype other than float32 is selected) and a field of the JSON records.

Measures (per case = shape, M, threads, variant):
  us/call  median of N timed calls (N adaptive so each case takes about --target-s)
  GB/s     weight bytes / time (packed int4 + scales (4 or 2 B each) [+ zp]; fp32: 4*K*N)
  GOPS     2*M*N*K / time
  x fp32   fp32-matmul time / variant time (same shape, M, threads)
  acc4/acc0  acc0 twin time / acc4 time;  x builtin: built-in twin time / custom time
  rel.err  max|y - ref| / max|ref| on the first <= 4 rows, ref = numpy on the variant's own
           dequantized weights (float64; for float16: the fp16 A and the fp16-rounded scales,
           y compared in float64). A rel.err above the tolerance is printed with a trailing
           "!" and warned about on stderr; tolerance (--check-tol overrides): float16 0.02
           (ORT's own fp16 MatMulNBits tests use rel 0.02, abs 0.055), float32 1e-4 for
           acc0/acc1 (fp32 compute) and 0.05 for acc2-4 (fp16/bf16/int8 compute)
  x membw  GB/s / read bandwidth measured by bench/membw.c (1 GiB, same thread count) just
           before and after the case (--membw-bin PATH; rotating cases only unless --membw-always)
  bg load  CPU cores used by other processes while the case was timed (/proc/stat minus
           this process); > 0.2 on a 2-core box means the numbers are suspect. On a shared
           box use --quiet-wait S (wait for quiet before each case) and --retry-noisy N
           (re-time a case whose bg load exceeded --max-bg, keep the quietest attempt).

--rotate: one model per variant with R independent copies of the node, all fed by
the same A, each with its own (distinct) weights, R chosen so that R copies exceed
--rotate-mib of weights (default 256 MiB, 8x the 32 MiB L3). Per-matrix time =
call time / R, so this measures DRAM-streaming GEMV, not L3-resident GEMV.

Timing is interleaved: every variant of a case is warmed up, then timed in
--rounds rounds (A B C A B C ...), so slow drift of a noisy host hits all
variants alike.

Examples
  bench_matmulnbits.py --shapes llama3-8b --m 1,128 --threads 1,2 --json out.json
  bench_matmulnbits.py --shapes 4096x4096 --m 1 --rotate
  bench_matmulnbits.py --shapes llama3-8b --library target/release/libnibble.so --domain com.microsoft
  bench_matmulnbits.py --shapes 576x576 --quick            # smoke test
Shapes are KxN (in_features x out_features) or set names: llama3-8b, llama3.2-1b,
smollm2-135m, all.
"""
import argparse
import json
import math
import os
import platform
import sys
import time

import numpy as np

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    import onnxruntime as ort
except ImportError as e:  # pragma: no cover
    sys.exit(f"error: {e}. Install with: python3 -m venv .venv && .venv/bin/pip install onnxruntime onnx numpy")

SHAPE_SETS = {
    # name: [(label, K, N)]   K = in_features, N = out_features
    "llama3-8b": [("L3-8B q/o", 4096, 4096), ("L3-8B gate/up", 4096, 14336),
                  ("L3-8B down", 14336, 4096), ("L3-8B k/v", 4096, 1024)],
    "llama3.2-1b": [("L3.2-1B q/o", 2048, 2048), ("L3.2-1B gate/up", 2048, 8192),
                    ("L3.2-1B down", 8192, 2048)],
    "smollm2-135m": [("SmolLM2 q/o", 576, 576), ("SmolLM2 gate/up", 576, 1536),
                     ("SmolLM2 down", 1536, 576)],
}
SHAPE_SETS["all"] = SHAPE_SETS["llama3-8b"] + SHAPE_SETS["llama3.2-1b"] + SHAPE_SETS["smollm2-135m"]

MiB = 1 << 20
DTYPES = ("float32", "float16")
TENSOR_TYPE = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}


def die(msg, code=2):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(code)


def parse_int_list(s):
    return [int(x) for x in s.split(",") if x.strip()]


def parse_shapes(spec):
    out = []
    for tok in spec.split(","):
        tok = tok.strip()
        if not tok:
            continue
        if tok in SHAPE_SETS:
            out += SHAPE_SETS[tok]
            continue
        try:
            k, n = tok.lower().split("x")
            k, n = int(k), int(n)
        except ValueError:
            die(f"bad shape {tok!r}: use KxN (e.g. 4096x14336) or one of {sorted(SHAPE_SETS)}")
        label = next((l for l, kk, nn in SHAPE_SETS["all"] if (kk, nn) == (k, n)), f"{k}x{n}")
        out.append((label, k, n))
    return out


def rss_mib():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[:3]
    except OSError:
        return []


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_snapshot():
    """(busy jiffies of all CPUs, steal jiffies, this process's jiffies, monotonic s), for foreign load."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        with open("/proc/self/stat") as f:
            s = f.read().rsplit(")", 1)[1].split()
        busy = v[0] + v[1] + v[2] + v[5] + v[6]          # user nice system irq softirq
        return busy, v[7], int(s[11]) + int(s[12]), time.monotonic()
    except (OSError, ValueError, IndexError):
        return None


def foreign_load(a, b):
    """CPU cores used by other processes (and steal) between two snapshots."""
    if a is None or b is None or b[3] <= a[3]:
        return None, None
    dt = (b[3] - a[3]) * _TCK
    return max(0.0, ((b[0] - a[0]) - (b[2] - a[2])) / dt), (b[1] - a[1]) / dt


def wait_quiet(max_wait_s, threshold=0.25, probe_s=0.5):
    """Sleep until other processes use < threshold cores (probed over probe_s), at most max_wait_s."""
    t0 = time.monotonic()
    while True:
        a = cpu_snapshot()
        time.sleep(probe_s)
        load, steal = foreign_load(a, cpu_snapshot())
        if load is None or load + (steal or 0) < threshold or time.monotonic() - t0 >= max_wait_s:
            return time.monotonic() - t0 - probe_s, load


# --------------------------------------------------------------------------- weights

class QWeights:
    """Random INT4 block-quantized weight for one (K, N, block_size, asym) in ORT's layout."""

    def __init__(self, K, N, bs, asym, codes):
        self.K, self.N, self.bs, self.asym = K, N, bs, asym
        nb = (K + bs - 1) // bs
        self.nb = nb
        rng = np.random.default_rng(1000 * bs + asym)
        q = codes(N, nb * bs).reshape(N, nb, bs)                  # uint8 0..15, [N, nb, bs]
        # B: [N, nb, bs/2], element k of a block: low nibble for even k, high for odd k
        self.B = np.ascontiguousarray(q[:, :, 0::2] | (q[:, :, 1::2] << 4)).astype(np.uint8)
        sign = np.where(rng.random((N, nb)) < 0.5, -1.0, 1.0)
        self.scales = (sign * rng.uniform(0.005, 0.02, (N, nb))).astype(np.float32)
        if asym:
            zp = rng.integers(0, 16, (N, nb), dtype=np.uint8)
            zpp = np.zeros((N, (nb + 1) // 2), dtype=np.uint8)
            zpp[:, : (nb + 1) // 2] = zp[:, 0::2]
            zpp[:, : nb // 2] |= zp[:, 1::2] << 4
            self.zp, self.zp_packed = zp, zpp
        else:
            self.zp, self.zp_packed = None, None
        self._q = q

    def nbytes(self, dtype="float32"):
        """Bytes the kernel must stream: packed codes + scales in dtype (+ packed zp)."""
        return (self.B.nbytes + self.scales.size * np.dtype(dtype).itemsize
                + (self.zp_packed.nbytes if self.asym else 0))

    def dequant(self, dtype="float32"):
        """W [K, N] float32 with W[k, n] = (q[n, k] - zp[n, k//bs]) * scale[n, k//bs].

        dtype float16: the scales are first rounded to fp16, as the float16 model stores them."""
        zp = self.zp.astype(np.float32) if self.asym else np.float32(8.0)
        if self.asym:
            zp = zp[:, :, None]
        scales = self.scales if dtype == "float32" else self.scales.astype(dtype).astype(np.float32)
        w = (self._q.astype(np.float32) - zp) * scales[:, :, None]   # [N, nb, bs]
        w = w.reshape(self.N, self.nb * self.bs)[:, : self.K]
        return np.ascontiguousarray(w.T)

    def copy_r(self, r):
        """Distinct-but-equivalent data for rotating copy r (so no dedup can share them)."""
        if r == 0:
            return self.B, self.scales, self.zp_packed
        return (self.B ^ np.uint8(r & 0xFF), (self.scales * np.float32(1.0 + 1e-3 * r)),
                self.zp_packed)


class WeightCache:
    def __init__(self):
        self._codes = {}
        self._q = {}
        self._w = {}

    def codes_fn(self, K, N):
        def codes(n, kpad):
            key = (K, N)
            if key not in self._codes:
                rng = np.random.default_rng(K * 7919 + N)
                self._codes[key] = rng.integers(0, 16, (N, K), dtype=np.uint8)
            c = self._codes[key]
            if kpad == K:
                return c
            out = np.full((N, kpad), 8, dtype=np.uint8)      # pad codes: don't care
            out[:, :K] = c
            return out
        return codes

    def q(self, K, N, bs, asym):
        key = (K, N, bs, asym)
        if key not in self._q:
            self._q[key] = QWeights(K, N, bs, asym, self.codes_fn(K, N))
        return self._q[key]

    def w_fp32(self, K, N, bs, asym, dtype="float32"):
        key = (K, N, bs, asym, dtype)
        if key not in self._w:
            self._w[key] = self.q(K, N, bs, asym).dequant(dtype)
        return self._w[key]

    def drop(self, K, N):
        for d in (self._q, self._w):
            for key in [k for k in d if k[:2] == (K, N)]:
                del d[key]
        self._codes.pop((K, N), None)


# --------------------------------------------------------------------------- variants

class Variant:
    def __init__(self, kind, bs=None, asym=False, acc=None, domain="com.microsoft", op_type="MatMulNBits",
                 dtype="float32"):
        self.kind, self.bs, self.asym, self.acc = kind, bs, asym, acc
        self.domain, self.op_type = domain, op_type
        self.dtype = dtype          # "float32" | "float16": A, scales, Y (MatMulNBits type T)

    @property
    def base_name(self):
        if self.kind == "fp32":
            return "fp32-matmul"
        return f"q4-bs{self.bs}-{'asym' if self.asym else 'sym'}-acc{self.acc}"

    @property
    def name(self):
        return ("custom:" if self.kind == "custom" else "") + self.base_name


def build_model(variant, K, N, wc, ref_bs, R=1):
    """Return (serialized model bytes, weight bytes per copy, list of output names)."""
    nodes, inits, outs = [], [], []
    elem = TENSOR_TYPE[variant.dtype]
    A = helper.make_tensor_value_info("A", elem, ["M", K])
    opsets = [helper.make_opsetid("", 17)]
    if variant.kind == "fp32":
        W = wc.w_fp32(K, N, ref_bs, False)
        per_copy = W.nbytes
        for r in range(R):
            s = f"_{r}"
            Wr = W if r == 0 else (W * np.float32(1.0 + 1e-3 * r))
            inits.append(numpy_helper.from_array(Wr, "W" + s))
            nodes.append(helper.make_node("MatMul", ["A", "W" + s], ["Y" + s], name="mm" + s))
            outs.append("Y" + s)
    else:
        qw = wc.q(K, N, variant.bs, variant.asym)
        per_copy = qw.nbytes(variant.dtype)
        opsets.append(helper.make_opsetid(variant.domain, 1))
        if variant.domain != "com.microsoft":
            opsets.append(helper.make_opsetid("com.microsoft", 1))
        for r in range(R):
            s = f"_{r}"
            B, sc, zpp = qw.copy_r(r)
            ins = ["A", "B" + s, "scales" + s]
            inits.append(numpy_helper.from_array(B, "B" + s))
            inits.append(numpy_helper.from_array(sc.reshape(-1).astype(variant.dtype), "scales" + s))
            if variant.asym:
                ins.append("zp" + s)
                inits.append(numpy_helper.from_array(zpp.reshape(-1), "zp" + s))
            nodes.append(helper.make_node(variant.op_type, ins, ["Y" + s], domain=variant.domain,
                                          name="mmnb" + s, K=K, N=N, bits=4,
                                          block_size=variant.bs, accuracy_level=variant.acc))
            outs.append("Y" + s)
    graph = helper.make_graph(nodes, "bench", [A],
                              [helper.make_tensor_value_info(o, elem, ["M", N]) for o in outs],
                              inits)
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model.SerializeToString(), per_copy, outs


def make_session_options(threads, args, library=None):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    if args.no_spin:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if library:
        try:
            so.register_custom_ops_library(library)
        except Exception as e:  # noqa: BLE001
            die(f"onnxruntime could not load custom-op library {library}: {e}")
    return so


class Runner:
    """A session plus IOBinding(s) per M, with pre-allocated inputs/outputs."""

    def __init__(self, variant, K, N, threads, wc, args, R=1):
        self.variant, self.K, self.N, self.R = variant, K, N, R
        t0 = time.perf_counter()
        model, self.per_copy_bytes, self.outs = build_model(variant, K, N, wc, args.ref_bs, R)
        self.model_mib = len(model) / MiB
        rss0 = rss_mib()
        lib = args.library if variant.kind == "custom" else None
        so = make_session_options(threads, args, lib)
        try:
            self.sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001
            if variant.kind == "custom":
                die(f"session with {variant.domain}::{variant.op_type} from {args.library} failed: {e}")
            raise
        del model
        self.create_s = time.perf_counter() - t0
        self.rss_delta_mib = rss_mib() - rss0
        self.bindings = {}

    def bind(self, A):
        M = A.shape[0]
        if M not in self.bindings:
            io = self.sess.io_binding()
            a = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(A))
            io.bind_ortvalue_input("A", a)
            ys = []
            for o in self.outs:
                y = ort.OrtValue.ortvalue_from_shape_and_type([M, self.N], np.dtype(self.variant.dtype))
                io.bind_ortvalue_output(o, y)
                ys.append(y)
            self.bindings[M] = (io, a, ys)
        return self.bindings[M]

    def fn(self, A):
        io = self.bind(A)[0]
        run = self.sess.run_with_iobinding
        return lambda: run(io)

    def output0(self, A):
        io, _, ys = self.bind(A)
        self.sess.run_with_iobinding(io)
        return ys[0].numpy().copy()


def time_calls(fn, target_s, min_runs, max_runs, warmup_s):
    """Warm up for ~warmup_s (>= 2 calls), then time N individual calls; N ~ target_s / est."""
    pc = time.perf_counter
    t0 = pc()
    n = 0
    while True:
        fn()
        n += 1
        if (n >= 2 and pc() - t0 >= warmup_s) or n >= 200:
            break
    est = (pc() - t0) / n
    runs = max(min_runs, min(max_runs, int(target_s / max(est, 1e-9))))
    ns = time.perf_counter_ns
    samples = []
    for _ in range(runs):
        s = ns()
        fn()
        samples.append(ns() - s)
    return samples


def stats_us(samples_ns):
    a = np.sort(np.asarray(samples_ns, dtype=np.float64)) / 1e3
    return {"median": float(np.median(a)), "min": float(a[0]),
            "p10": float(np.percentile(a, 10)), "p90": float(np.percentile(a, 90)),
            "mean": float(a.mean()), "n": int(a.size)}


def membw_probe(binary, threads):
    """Median read GB/s of `membw -s 1024 -r 5 -t T -i avx512` (bench/membw.c), or None."""
    import subprocess
    try:
        out = subprocess.run([binary, "-s", "1024", "-r", "5", "-t", str(threads), "-i", "avx512"],
                             capture_output=True, text=True, timeout=120).stdout
        for line in out.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 6 and cells[1] == "avx512" and cells[2] == str(threads):
                return float(cells[4])
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return None


def call_overhead_us(threads, args):
    """Median us of run_with_iobinding on a 1-node Identity model (per-call floor)."""
    g = helper.make_graph([helper.make_node("Identity", ["A"], ["Y"])], "id",
                          [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 16])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    sess = ort.InferenceSession(m.SerializeToString(), make_session_options(threads, args),
                                providers=["CPUExecutionProvider"])
    io = sess.io_binding()
    a = ort.OrtValue.ortvalue_from_numpy(np.zeros((1, 16), np.float32))
    y = ort.OrtValue.ortvalue_from_shape_and_type([1, 16], np.float32)
    io.bind_ortvalue_input("A", a)
    io.bind_ortvalue_output("Y", y)
    return stats_us(time_calls(lambda: sess.run_with_iobinding(io), 0.2, 100, 100000, 0.05))["median"]


# --------------------------------------------------------------------------- main loop

def make_variants(args, dtype="float32"):
    vs = []
    for bs in args.bs:
        for zp in args.zp:
            for acc in args.acc:
                vs.append(Variant("q4", bs, zp == "asym", acc, dtype=dtype))
    if args.library:
        vs += [Variant("custom", v.bs, v.asym, v.acc, args.domain, args.op_type, dtype) for v in list(vs)]
    if args.fp32 and dtype == "float32":     # no fp16 MatMul kernel on the CPU EP: no fp16 baseline
        vs.append(Variant("fp32"))
    return vs


def check_tol(variant, args):
    """Largest acceptable rel.err (max|y - ref| / max|ref|) for a variant."""
    if args.check_tol is not None:
        return args.check_tol
    if variant.dtype == "float16":
        return 0.02                 # ORT's fp16 MatMulNBits tests: rel 0.02 (abs 0.055)
    return 1e-4 if variant.acc in (None, 0, 1) else 0.05


def run_case_group(label, K, N, threads, Ms, variants, wc, args, R_of, results, dtype="float32"):
    """Create all sessions for (shape, threads, dtype), then for each M time all variants interleaved."""
    runners = []
    for v in variants:
        R = R_of(v, K, N)
        r = Runner(v, K, N, threads, wc, args, R)
        runners.append(r)
        if args.verbose:
            print(f"#   session {v.name:26s} R={R:3d} model {r.model_mib:7.1f} MiB, create {r.create_s:6.2f} s, "
                  f"RSS +{r.rss_delta_mib:7.1f} MiB (now {rss_mib():.0f})", file=sys.stderr)
    rng = np.random.default_rng(K + N)
    for M in Ms:
        A = rng.standard_normal((M, K)).astype(np.float32)
        if dtype != "float32":
            A = A.astype(dtype)
        # correctness: each variant's first output vs numpy on its own dequantized weights
        errs = {}
        bad = set()
        if args.check:
            ms = min(M, 4)
            for r in runners:
                y = r.output0(A)[:ms].astype(np.float64)
                v = r.variant
                W = (wc.w_fp32(K, N, args.ref_bs, False) if v.kind == "fp32"
                     else wc.w_fp32(K, N, v.bs, v.asym, v.dtype))
                ref = A[:ms].astype(np.float64) @ W.astype(np.float64)
                errs[v.name] = float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30))
                tol = check_tol(v, args)
                if not errs[v.name] <= tol:
                    bad.add(v.name)
                    print(f"# WARNING: {label} M={M} thr={threads} {dtype} {v.name}: rel.err "
                          f"{errs[v.name]:.2e} > tolerance {tol:g}", file=sys.stderr)
        fns = [r.fn(A) for r in runners]
        for f in fns:                      # first-touch warm-up of every session
            for _ in range(2):
                f()
        per_round = args.target_s / args.rounds
        min_per_round = max(1, math.ceil(args.min_runs / args.rounds))
        probe = args.membw_bin and (args.rotate or args.membw_always)
        bw_before = membw_probe(args.membw_bin, threads) if probe else None
        best = None
        waited = 0.0
        for attempt in range(1 + args.retry_noisy):
            if args.quiet_wait > 0:
                waited += wait_quiet(args.quiet_wait)[0]
            samples = [[] for _ in runners]
            snap0 = cpu_snapshot()
            for _ in range(args.rounds):
                for i, f in enumerate(fns):
                    samples[i] += time_calls(f, per_round, min_per_round, args.max_runs, args.warmup_s)
            fload, steal = foreign_load(snap0, cpu_snapshot())
            if best is None or (fload is not None and fload < best[1]):
                best = (samples, fload, steal, attempt + 1)
            if fload is None or fload <= args.max_bg or attempt == args.retry_noisy:
                break
            print(f"#   {label} M={M} thr={threads}: other processes used {fload:.2f} cores, "
                  f"retry {attempt + 1}/{args.retry_noisy}", file=sys.stderr)
        samples, fload, steal, attempts = best
        bw_after = membw_probe(args.membw_bin, threads) if probe else None
        bws = [b for b in (bw_before, bw_after) if b]
        membw = sum(bws) / len(bws) if bws else None
        case = []
        for r, smp in zip(runners, samples):
            st = stats_us(smp)
            t_mat = st["median"] / r.R                        # per matrix
            rec = {
                "label": label, "K": K, "N": N, "M": M, "threads": threads, "dtype": r.variant.dtype,
                "variant": r.variant.name, "kind": r.variant.kind, "bs": r.variant.bs,
                "asym": r.variant.asym, "acc": r.variant.acc, "R": r.R,
                "rotating": r.R > 1,
                "us_call": st, "us": t_mat, "us_min": st["min"] / r.R,
                "weight_bytes": r.per_copy_bytes,
                "GBps": r.per_copy_bytes / (t_mat * 1e3),
                "GOPS": 2.0 * M * N * K / (t_mat * 1e3),
                "rel_err": errs.get(r.variant.name),
                "check_ok": (r.variant.name not in bad) if r.variant.name in errs else None,
                "create_s": r.create_s, "rss_delta_mib": r.rss_delta_mib,
                "foreign_cpu": fload, "steal_cpu": steal, "waited_quiet_s": waited, "attempts": attempts,
                "membw_GBps": membw, "membw_before_after": [bw_before, bw_after],
            }
            case.append(rec)
        by = {c["variant"]: c for c in case}
        for c in case:
            c["x_membw"] = c["GBps"] / membw if membw else None
            f = by.get("fp32-matmul")
            c["x_fp32"] = f["us"] / c["us"] if f else None
            twin = by.get(c["variant"].replace("custom:", "")) if c["kind"] == "custom" else None
            c["x_builtin"] = twin["us"] / c["us"] if twin else None
            acc0 = by.get(c["variant"].replace("acc4", "acc0")) if c["acc"] == 4 else None
            c["x_acc0"] = acc0["us"] / c["us"] if acc0 else None
        results += case
        print_rows(case, stream=sys.stderr if args.quiet_progress else sys.stdout, header=False, progress=True,
                   show_dtype=args.show_dtype)
    del runners


def fmt(x, nd=1):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{nd}f}"


LONG_HDR = ("| shape | K | N | M | thr | variant | R | µs (median) | µs (min) | p10–p90 µs | GB/s | GOPS "
            "| x fp32 | acc4/acc0 | x builtin | x membw | rel.err | bg load |\n"
            "|---|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")


def long_hdr(show_dtype=False):
    """LONG_HDR, with a dtype column before variant if show_dtype."""
    if not show_dtype:
        return LONG_HDR
    return (LONG_HDR.replace("| thr | variant |", "| thr | dtype | variant |", 1)
            .replace("|---:|---|---:|", "|---:|---|---|---:|", 1))


def row(c, show_dtype=False):
    st = c["us_call"]
    R = c["R"]
    dt = f" {c.get('dtype', 'float32')} |" if show_dtype else ""
    err = ('%.1e' % c['rel_err']) if c['rel_err'] is not None else '–'
    if c.get("check_ok") is False:
        err += "!"
    return (f"| {c['label']} | {c['K']} | {c['N']} | {c['M']} | {c['threads']} |{dt} {c['variant']} | {R} "
            f"| {fmt(c['us'])} | {fmt(c['us_min'])} | {fmt(st['p10'] / R)}–{fmt(st['p90'] / R)} "
            f"| {fmt(c['GBps'], 2)} | {fmt(c['GOPS'], 1)} | {fmt(c['x_fp32'], 2)} | {fmt(c['x_acc0'], 2)} "
            f"| {fmt(c['x_builtin'], 2)} | {fmt(c.get('x_membw'), 2)} | {err} "
            f"| {fmt(c.get('foreign_cpu'), 2)} |")


def print_rows(rows, stream=sys.stdout, header=True, progress=False, show_dtype=False):
    if header:
        print(long_hdr(show_dtype), file=stream)
    for c in rows:
        print(("# " if progress else "") + row(c, show_dtype), file=stream)
    stream.flush()


def print_wide(results, stream=sys.stdout, show_dtype=False):
    """One row per (shape, M, threads, single/rotating[, dtype]): median µs per matrix for each variant."""
    variants = []
    for c in results:
        if c["variant"] not in variants:
            variants.append(c["variant"])

    def key(c):
        return (c["label"], c["K"], c["N"], c["M"], c["threads"], c["rotating"], c.get("dtype", "float32"))
    keys = []
    for c in results:
        if key(c) not in keys:
            keys.append(key(c))
    dt_hdr, dt_sep = ("dtype | ", "---|") if show_dtype else ("", "")
    print("| shape | M | thr | mode | " + dt_hdr + " | ".join(variants) + " |", file=stream)
    print("|---|---:|---:|---|" + dt_sep + "---:|" * len(variants), file=stream)
    for k in keys:
        cells = []
        for v in variants:
            c = next((c for c in results if key(c) == k and c["variant"] == v), None)
            cells.append(fmt(c["us"]) if c else "–")
        mode = "rotating" if k[5] else "single"
        dt = f"{k[6]} | " if show_dtype else ""
        print(f"| {k[0]} {k[1]}x{k[2]} | {k[3]} | {k[4]} | {mode} | " + dt + " | ".join(cells) + " |", file=stream)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="all", help="comma list of KxN or set names (%s)" % ",".join(SHAPE_SETS))
    p.add_argument("--m", default="1,128", help="comma list of M (rows of A); default 1,128")
    p.add_argument("--threads", default="1,2", help="intra_op_num_threads list; default 1,2")
    p.add_argument("--bs", default="32,128", help="block sizes; default 32,128")
    p.add_argument("--zp", default="sym,asym", help="sym (no zero_points input) and/or asym (uint8 zp)")
    p.add_argument("--acc", default="4,0", help="accuracy_level list; default 4,0")
    p.add_argument("--dtype", default="float32",
                   help="comma list of float32 and/or float16: MatMulNBits type T (A, scales, Y); every case "
                        "runs once per dtype. The fp32 MatMul baseline runs for float32 only (the CPU EP has no "
                        "float16 MatMul kernel, it would Cast to fp32), so x fp32 is empty on float16 rows; "
                        "default float32")
    p.add_argument("--no-fp32", dest="fp32", action="store_false", help="skip the fp32 MatMul baseline")
    p.add_argument("--ref-bs", type=int, default=32,
                   help="block size whose (sym) dequantized weights feed fp32-matmul; default 32")
    p.add_argument("--rotate", action="store_true",
                   help="R independent copies of each node (distinct weights) > --rotate-mib: DRAM-streaming rate")
    p.add_argument("--rotate-mib", type=float, default=256.0, help="weights per rotating model; default 256 MiB")
    p.add_argument("--library", help="custom-op library (.so) to time side by side with the built-in")
    p.add_argument("--domain", help="node domain for the custom op (required with --library)")
    p.add_argument("--op-type", default="MatMulNBits", help="op type for the custom op; default MatMulNBits")
    p.add_argument("--target-s", type=float, default=0.7, help="timed seconds per case; default 0.7")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per case; default 3")
    p.add_argument("--min-runs", type=int, default=6, help="min timed calls per case; default 6")
    p.add_argument("--max-runs", type=int, default=20000)
    p.add_argument("--warmup-s", type=float, default=0.03, help="warm-up seconds per round; default 0.03")
    p.add_argument("--no-spin", action="store_true", help="session.intra_op.allow_spinning=0")
    p.add_argument("--quiet-wait", type=float, default=0.0, metavar="S",
                   help="before each case wait up to S s until other processes use < 0.25 cores; default 0 (off)")
    p.add_argument("--retry-noisy", type=int, default=0, metavar="N",
                   help="re-time a case up to N times while other processes used > --max-bg cores during it; "
                        "the quietest attempt is kept (default 0)")
    p.add_argument("--max-bg", type=float, default=0.2, help="threshold for --retry-noisy, in cores; default 0.2")
    p.add_argument("--membw-bin", metavar="PATH",
                   help="bench/membw.c binary: with --rotate, measure read GB/s (1 GiB, same threads) before and "
                        "after each case and report GB/s as a fraction of it (x membw)")
    p.add_argument("--membw-always", action="store_true", help="probe membw for non-rotating cases too")
    p.add_argument("--no-check", dest="check", action="store_false", help="skip the numpy correctness check")
    p.add_argument("--check-tol", type=float, metavar="X",
                   help="rel.err above which a result is flagged (\"!\" and a warning on stderr); default 0.02 "
                        "for float16, 1e-4 for float32 acc0/acc1, 0.05 for float32 acc2-4")
    p.add_argument("--quick", action="store_true", help="smoke test: target 0.1 s, 1 round")
    p.add_argument("--json", help="write all records + metadata to this file")
    p.add_argument("--verbose", "-v", action="store_true", help="session creation times and RSS to stderr")
    p.add_argument("--quiet-progress", action="store_true", help="progress rows to stderr instead of stdout")
    args = p.parse_args()

    if args.library is not None:
        if not os.path.isfile(args.library):
            die(f"--library: no such file: {args.library}")
        if not args.domain:
            die("--library needs --domain (e.g. --domain com.microsoft to override the built-in, "
                "or your own domain)")
        make_session_options(1, args, os.path.abspath(args.library))    # fail early if it cannot load
        args.library = os.path.abspath(args.library)
    elif args.domain:
        die("--domain is only meaningful with --library PATH")
    if args.quick:
        args.target_s, args.rounds, args.min_runs = 0.1, 1, 3
    shapes = parse_shapes(args.shapes)
    Ms = parse_int_list(args.m)
    args.bs = parse_int_list(args.bs)
    args.acc = parse_int_list(args.acc)
    args.zp = [z.strip() for z in args.zp.split(",") if z.strip()]
    if any(z not in ("sym", "asym") for z in args.zp):
        die("--zp takes sym and/or asym")
    args.dtype = [d.strip() for d in args.dtype.split(",") if d.strip()]
    if not args.dtype or any(d not in DTYPES for d in args.dtype):
        die("--dtype takes float32 and/or float16")
    args.dtype = list(dict.fromkeys(args.dtype))
    args.show_dtype = args.dtype != ["float32"]
    threads_list = parse_int_list(args.threads)
    variants_of = {d: make_variants(args, d) for d in args.dtype}
    if not any(variants_of.values()):
        die("no variants selected")

    def R_of(v, K, N):
        if not args.rotate:
            return 1
        per = 4 * K * N if v.kind == "fp32" else None
        if per is None:
            nb = (K + v.bs - 1) // v.bs
            per = (N * nb * v.bs // 2 + np.dtype(v.dtype).itemsize * N * nb
                   + (N * ((nb + 1) // 2) if v.asym else 0))
        return int(args.rotate_mib * MiB // per) + 1

    meta = {
        "ort_version": ort.__version__, "onnx_version": onnx.__version__, "numpy_version": np.__version__,
        "python": platform.python_version(), "cpu": cpu_model(), "nproc": os.cpu_count(),
        "argv": sys.argv, "start": time.strftime("%Y-%m-%dT%H:%M:%S"), "loadavg_start": loadavg(),
    }
    meta["call_overhead_us"] = {t: call_overhead_us(t, args) for t in threads_list}
    print(f"# onnxruntime {ort.__version__}, {meta['cpu']}, {meta['nproc']} CPUs, loadavg {' '.join(meta['loadavg_start'])}")
    print("# call overhead (run_with_iobinding on Identity, µs): " +
          ", ".join(f"{t} thr {v:.1f}" for t, v in meta["call_overhead_us"].items()))
    print(f"# rotate={args.rotate} (R copies > {args.rotate_mib:g} MiB)  target {args.target_s}s/case in "
          f"{args.rounds} rounds; µs and GB/s are per matrix (call time / R)")
    print("# progress rows:")
    print("# " + long_hdr(args.show_dtype).replace("\n", "\n# "))
    results = []
    wc = WeightCache()
    t0 = time.perf_counter()
    for label, K, N in shapes:
        for threads in threads_list:
            for dtype in args.dtype:
                if variants_of[dtype]:
                    run_case_group(label, K, N, threads, Ms, variants_of[dtype], wc, args, R_of, results, dtype)
        wc.drop(K, N)
    meta["elapsed_s"] = time.perf_counter() - t0
    meta["loadavg_end"] = loadavg()
    print()
    print(f"## Results (onnxruntime {ort.__version__}; {time.strftime('%Y-%m-%d %H:%M')}; "
          f"{meta['elapsed_s']:.0f} s; loadavg end {' '.join(meta['loadavg_end'])})")
    print()
    print_rows(results, show_dtype=args.show_dtype)
    print()
    print("### Median µs per matrix, by variant")
    print()
    print_wide(results, show_dtype=args.show_dtype)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)
        print(f"\n# wrote {args.json}")


if __name__ == "__main__":
    main()
