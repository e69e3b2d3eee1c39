#!/usr/bin/env python3
"""Throwaway proof that cuda_shim.h runs the library's real CUDA kernels.

Fills reduce.cu (T=float, R=FloatSum<float, double>), softmax.cu (T=float, C=float,
log=false) and scatter_add.cu (T=__half, K=u32) by text replacement, wraps them in one
translation unit as the library will (one namespace per variant, an extern "C" entry each),
compiles it with the library's exact g++ line, and runs it from a small dlopen driver that
compares with host computations. Prints the compile and run times.

    python3 crates/rnn-core/src/emu/shim/try_kernels.py [--all] [--keep DIR]

--all also compiles (without running) every template for every dtype and op, with the
substitutions the Rust side makes (gpu/target.rs, op_table.rs), one translation unit per
template, to check that the shim supports everything the kernels use.
"""
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", ".."))
KERNELS = os.path.join(ROOT, "crates", "rnn-kernels", "cuda")
GXX = ["g++", "-std=c++17", "-O1", "-fno-strict-aliasing", "-fPIC", "-shared", "-pthread", "-I", HERE]


def read(name):
    with open(os.path.join(KERNELS, name)) as f:
        return f.read()


def fill(template, subs):
    text = read(template)
    for key, value in subs.items():
        text = text.replace("{{%s}}" % key, value)
    assert "{{" not in text, f"{template}: unfilled placeholder in {text[text.index('{{'):][:40]}"
    assert 'extern "C" __global__ void kernel(' in text
    return text.replace('extern "C" __global__ void kernel(', "__global__ void kernel(")


def translation_unit(variants):
    """variants: list of (template, subs, half). The contract's layout, one namespace each."""
    common = read("common.cuh")
    parts = ['#include "cuda_shim.h"\n']
    for i, (template, subs, half) in enumerate(variants):
        parts.append(f"namespace rnn_v{i} {{\n")
        if half:
            parts.append("#define RNN_HALF\n")
        parts.append(common + "\n" + fill(template, subs) + "\n")
        if half:
            parts.append("#undef RNN_HALF\n")
        parts.append("}\n")
        parts.append(
            f'extern "C" int rnn_emu_v{i}(const unsigned long long* words, unsigned long n_words,\n'
            "                          void* const* buffers, unsigned long n_buffers,\n"
            "                          const rnn_emu::LaunchDims* dims, char* err, unsigned long err_cap) {\n"
            f"    return rnn_emu::launch(rnn_v{i}::kernel, words, n_words, buffers, n_buffers, dims, err, err_cap);\n"
            "}\n"
        )
    return "".join(parts)


def compile_so(source, out_dir, name):
    cpp = os.path.join(out_dir, name + ".cpp")
    so = os.path.join(out_dir, name + ".so")
    with open(cpp, "w") as f:
        f.write(source)
    start = time.time()
    r = subprocess.run(GXX + ["-o", so, cpp], capture_output=True, text=True)
    took = time.time() - start
    if r.returncode != 0:
        sys.stderr.write(r.stderr[:6000])
        raise SystemExit(f"g++ failed on {cpp}")
    return so, took


DRIVER = r"""
// Loads batch.so and runs reduce (modes 2 and 1), softmax and scatter_add, checked on the host.
#include <dlfcn.h>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

struct LaunchDims { unsigned grid[3]; unsigned block[3]; unsigned shared_bytes; unsigned os_threads; };
typedef int (*Entry)(const unsigned long long*, unsigned long, void* const*, unsigned long, const LaunchDims*, char*, unsigned long);
typedef unsigned long long u64;
const u64 CONTIGUOUS = 0xffffffffull;
static int failures = 0;

// Device-like buffers: 256-byte aligned, sizes rounded up to 256 bytes.
template <class T> struct Buf {
    T* p; size_t n;
    explicit Buf(size_t count) : n(count) {
        size_t bytes = (count * sizeof(T) + 255) / 256 * 256;
        p = (T*)aligned_alloc(256, bytes ? bytes : 256);
        memset(p, 0, bytes ? bytes : 256);
    }
    ~Buf() { free(p); }
    T& operator[](size_t i) { return p[i]; }
};

static double launch(Entry f, const char* what, std::vector<u64> w, std::vector<void*> bufs, unsigned grid,
                     unsigned block, unsigned os_threads) {
    LaunchDims d{{grid, 1, 1}, {block, 1, 1}, 0, os_threads};
    char err[512];
    auto t0 = std::chrono::steady_clock::now();
    int rc = f(w.data(), w.size(), bufs.data(), bufs.size(), &d, err, sizeof err);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (rc) { printf("FAIL %s: rc %d: %s\n", what, rc, err); ++failures; }
    return ms;
}

static void check(bool ok, const char* what) {
    if (!ok) ++failures;
    printf("%-60s %s\n", what, ok ? "ok" : "FAILED");
}

static float ulp_diff(float a, float b) { return std::fabs(a - b) / std::fabs(std::nextafter(b, INFINITY) - b); }

// reduce: x is [outer, r] row-major (or [r, outer] when `transposed`), summed over r.
static void reduce(Entry f, u64 outer, u64 r, u64 mode, bool transposed, bool integers, unsigned os) {
    Buf<float> x(outer * r), out(outer);
    std::mt19937 rng(7);
    for (u64 i = 0; i < outer * r; ++i)
        x[i] = integers ? (float)((int)(rng() % 201) - 100) : std::ldexp((float)(rng() % 2000001) - 1e6f, -20);
    std::vector<u64> w = {outer, r, mode, 0, 6, 0};
    if (transposed) {
        w.insert(w.end(), {CONTIGUOUS, 0});       // kept: outputs adjacent (stride 1)
        w[5] = w.size();
        w.insert(w.end(), {1, 0, r, outer});      // reduced: rank 1, start 0, dims [r], strides [outer]
    } else {
        w.insert(w.end(), {1, 0, outer, r});      // kept: rank 1, start 0, dims [outer], strides [r]
        w[5] = w.size();
        w.insert(w.end(), {CONTIGUOUS, 0});       // reduced: contiguous
    }
    const unsigned grid = mode == 2 ? (unsigned)outer : (unsigned)((outer * 32 + 255) / 256);
    double ms = launch(f, "reduce", w, {x.p, out.p, nullptr}, grid, 256, os);
    float worst = 0;
    bool exact = true;
    for (u64 o = 0; o < outer; ++o) {
        double s = 0;
        for (u64 j = 0; j < r; ++j) s += x[transposed ? j * outer + o : o * r + j];
        exact &= out[o] == (float)s;
        worst = std::fmax(worst, ulp_diff(out[o], (float)s));
    }
    char what[160];
    snprintf(what, sizeof what, "reduce mode %llu %s%s outer=%llu r=%llu (%.2f ms, %u os threads, max %g ulp)",
             mode, transposed ? "strided " : "", integers ? "ints" : "floats", outer, r, ms, os, worst);
    check(integers ? exact : worst <= 1, what);
}

// softmax over rows of n (row stride n, or the transposed view with element stride `rows`).
static void softmax(Entry f, u64 rows, u64 n, bool transposed, unsigned os) {
    Buf<float> x(rows * n), out(rows * n);
    std::mt19937 rng(11);
    for (u64 i = 0; i < rows * n; ++i) x[i] = (float)((int)(rng() % 2001) - 1000) / 100.0f;
    std::vector<u64> w = {rows, n, transposed ? rows : 1, 4};
    if (transposed) w.insert(w.end(), {CONTIGUOUS, 0});
    else w.insert(w.end(), {1, 0, rows, n});
    double ms = launch(f, "softmax", w, {x.p, out.p}, (unsigned)rows, 256, os);
    double worst = 0;
    for (u64 row = 0; row < rows; ++row) {
        auto at = [&](u64 k) { return x[transposed ? k * rows + row : row * n + k]; };
        float m = -INFINITY;
        for (u64 k = 0; k < n; ++k) m = std::fmax(m, at(k));
        double s = 0;
        for (u64 k = 0; k < n; ++k) s += std::exp((double)at(k) - m);
        for (u64 k = 0; k < n; ++k) {
            double want = std::exp((double)at(k) - m) / s;
            worst = std::fmax(worst, std::fabs(out[row * n + k] - want) / want);
        }
    }
    char what[160];
    snprintf(what, sizeof what, "softmax %srows=%llu n=%llu (%.2f ms, %u os threads, max rel err %.1e)",
             transposed ? "strided " : "", rows, n, ms, os, worst);
    check(worst < 2e-6, what);
}

static float h2f(unsigned short h) { // exact f16 -> f32
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e ? std::ldexp((float)(m | 1024), e - 25) : std::ldexp((float)m, -24);
    return (h & 0x8000) ? -v : v;
}

// scatter_add on f16 with u32 ids: out[o, ids(i), k] += src(i); id 9 at i = 17 is out of range.
static void scatter_add(Entry f, unsigned os) {
    const u64 outer = 2, m = 50, inner = 3, size = 4, n = outer * m * inner;
    Buf<unsigned> ids(n);
    Buf<unsigned short> src(n), out(outer * size * inner);
    Buf<u64> bad(1);
    bad[0] = ~0ull;
    std::mt19937 rng(3);
    std::vector<double> want(outer * size * inner, 0.0);
    for (u64 i = 0; i < n; ++i) {
        ids[i] = i == 17 ? 9 : rng() % size;
        const int q = (int)(rng() % 17) - 8;                  // src = q / 4, exact in f16
        const float v = q / 4.0f;
        unsigned short bits = 0;                              // v's f16 bits
        if (v != 0) {
            int e; float fr = std::frexp(std::fabs(v), &e); // v = fr * 2^e, fr in [0.5, 1)
            bits = (unsigned short)(((e - 1 + 15) << 10) | ((unsigned)std::ldexp(fr * 2 - 1, 10) & 1023));
            if (v < 0) bits |= 0x8000;
        }
        src[i] = bits;
        if (h2f(bits) != v) { printf("bad f16 encoding of %g\n", v); ++failures; }
        if (ids[i] < size) want[(i / (inner * m) * size + ids[i]) * inner + i % inner] += v;
    }
    std::vector<u64> w = {n, m, size, inner, 6, 8, CONTIGUOUS, 0, CONTIGUOUS, 0};
    double ms = launch(f, "scatter_add", w, {ids.p, src.p, out.p, bad.p}, (unsigned)((n + 255) / 256), 256, os);
    bool ok = bad[0] == 17;
    for (u64 e = 0; e < want.size(); ++e) ok &= h2f(out[e]) == (float)want[e];
    char what[160];
    snprintf(what, sizeof what, "scatter_add f16/u32 n=%llu (%.2f ms, %u os threads, bad=%llu)", n, ms, os, bad[0]);
    check(ok, what);
}

int main(int argc, char** argv) {
    void* so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!so) { printf("dlopen: %s\n", dlerror()); return 1; }
    Entry red = (Entry)dlsym(so, "rnn_emu_v0"), soft = (Entry)dlsym(so, "rnn_emu_v1"), scat = (Entry)dlsym(so, "rnn_emu_v2");
    if (!red || !soft || !scat) { printf("dlsym failed\n"); return 1; }
    for (unsigned os : {0u, 1u}) {
        reduce(red, 5, 3000, 2, false, true, os);
        reduce(red, 5, 3000, 2, true, false, os);
        reduce(red, 37, 100, 1, false, true, os);
        reduce(red, 37, 1000, 1, true, false, os);
        softmax(soft, 7, 300, false, os);
        softmax(soft, 6, 1000, true, os);
        scatter_add(scat, os);
    }
    reduce(red, 64, 100000, 2, false, false, 0);   // a larger one, for timing
    reduce(red, 4096, 100, 1, false, true, 0);
    softmax(soft, 512, 1024, false, 0);
    printf(failures ? "try_kernels: %d FAILED\n" : "try_kernels: all ok\n", failures);
    return failures ? 1 : 0;
}
"""

# ---- --all: every variant the Rust side can generate (gpu/target.rs, op_table.rs) ----

DTYPES = {"U8": "u8", "U32": "u32", "I64": "i64", "F16": "__half", "BF16": "__nv_bfloat16", "F32": "float", "F64": "double"}
FLOAT = {"F16", "BF16", "F32", "F64"}
HALF = {"F16", "BF16"}
UNARY = ["(-x)", "fabs(x)", "exp(x)", "log(x)", "sqrt(x)", "(1 / x)", "(x * x)", "sin(x)", "cos(x)", "tanh(x)",
         "erf(x)", "(1 / (1 + exp(-x)))", "(x > 0 ? x : 0)",
         "(C(0.5) * x * (1 + tanh(C(0.7978845608028654) * (x + C(0.044715) * x * x * x))))",
         "(C(0.5) * x * (1 + erf(x * C(0.7071067811865476))))", "(x / (1 + exp(-x)))",
         "(fmax(x, 0) + log1p(exp(-fabs(x))))", "(x > 0 ? 1 : 0)"]
BINARY = {"Add": "(a + b)", "Sub": "(a - b)", "Mul": "(a * b)", "Div": "(a / b)", "Pow": "pow(a, b)",
          "Maximum": "((a != a || b != b) ? a + b : fmax(a, b))", "Minimum": "((a != a || b != b) ? a + b : fmin(a, b))"}


def compute(d):
    return "float" if d in HALF else DTYPES[d]


def int_range(d):
    return {"U8": ("0.0", "255.0"), "U32": ("0.0", "4294967295.0")}.get(d, ("-9223372036854775808.0", "9223372036854775807.0"))


def convert(src, dst):
    t, wide = DTYPES[dst], "(double)load(x)"
    if src == dst:
        return "x"
    if dst not in FLOAT:
        if src in FLOAT:
            lo, hi = int_range(dst)
            return f"float_to_int<{t}>({wide}, {lo}, {hi})"
        return f"({t})x"
    return {"F16": f"__double2half({wide})", "BF16": f"__double2bfloat16({wide})", "F32": f"(float){wide}", "F64": wide}[dst]


def binary_store(op, d):
    t = DTYPES[d]
    if d in FLOAT:
        return f"store<{t}, C>({BINARY[op]})"
    if op == "Div" and d == "I64":
        return "((b == 0 || (a == (i64)0x8000000000000000ull && b == -1)) ? (i64)0 : (i64)(a / b))"
    if op == "Div":
        return f"(b == 0 ? ({t})0 : ({t})(a / b))"
    if op == "Pow":
        lo, hi = int_range(d)
        return f"float_to_int<{t}>(pow((double)a, (double)b), {lo}, {hi})"
    if op == "Maximum":
        return "(a > b ? a : b)"
    if op == "Minimum":
        return "(a < b ? a : b)"
    return f"({t})((u64)a {dict(Add='+', Sub='-', Mul='*')[op]} (u64)b)"


def value_expr(d, word):
    return {"F16": f"__ushort_as_half((unsigned short)info.w[{word}])",
            "BF16": f"__ushort_as_bfloat16((unsigned short)info.w[{word}])",
            "F32": f"__int_as_float((int)info.w[{word}])",
            "F64": f"__longlong_as_double((long long)info.w[{word}])"}.get(d, f"({DTYPES[d]})info.w[{word}]")


def reducer(op, d):
    t = DTYPES[d]
    if op == "sum":
        return {"F16": f"FloatSum<{t}, float>", "BF16": f"FloatSum<{t}, float>", "F32": f"FloatSum<{t}, double>",
                "F64": f"FloatSum<{t}, double>", "U8": f"UnsignedSum<{t}>", "U32": f"UnsignedSum<{t}>"}.get(d, "SignedSum")
    greater = "true" if op in ("max", "argmax") else "false"
    arg = "true" if op.startswith("arg") else "false"
    return f"Extreme<{t}, {compute(d)}, {'u32' if arg == 'true' else t}, {greater}, {arg}>"


def all_variants():
    keys = ["U8", "U32", "I64"]
    v = {}
    v["fill.cu"] = [({"T": DTYPES[d], "value": value_expr(d, 1)}, d in HALF) for d in DTYPES]
    v["copy.cu"] = [({"T": DTYPES[a], "O": DTYPES[b], "convert": convert(a, b)}, a in HALF or b in HALF)
                    for a in DTYPES for b in DTYPES]
    v["unary.cu"] = [({"T": DTYPES[d], "C": compute(d), "expr": e}, d in HALF) for d in FLOAT for e in UNARY]
    v["binary.cu"] = [({"T": DTYPES[d], "C": compute(d), "store": binary_store(op, d)}, d in HALF)
                      for d in DTYPES for op in BINARY]
    v["cmp.cu"] = [({"T": DTYPES[d], "C": compute(d), "op": op}, d in HALF)
                   for d in DTYPES for op in ["==", "!=", "<", "<=", ">", ">="]]
    v["where.cu"] = [({"K": DTYPES[k], "T": DTYPES[d]}, d in HALF) for k in keys for d in DTYPES]
    v["reduce.cu"] = [({"T": DTYPES[d], "R": reducer(op, d)}, d in HALF)
                      for d in DTYPES for op in ["sum", "max", "min", "argmax", "argmin"]]
    v["softmax.cu"] = [({"T": DTYPES[d], "C": compute(d), "log": log}, d in HALF) for d in FLOAT for log in ["true", "false"]]
    v["gather.cu"] = [({"T": DTYPES[d], "K": DTYPES[k]}, d in HALF) for d in DTYPES for k in keys]
    v["scatter_add.cu"] = [({"T": DTYPES[d], "K": DTYPES[k]}, d in HALF) for d in DTYPES for k in keys]
    v["fold2d.cu"] = [({"T": DTYPES[d]}, d in HALF) for d in DTYPES]
    v["unfold2d.cu"] = [({"T": DTYPES[d], "pad": value_expr(d, 13)}, d in HALF) for d in DTYPES]
    return v


def main():
    args = sys.argv[1:]
    out_dir = args[args.index("--keep") + 1] if "--keep" in args else tempfile.mkdtemp(prefix="rnn_emu_")
    os.makedirs(out_dir, exist_ok=True)
    variants = [
        ("reduce.cu", {"T": "float", "R": "FloatSum<float, double>"}, False),
        ("softmax.cu", {"T": "float", "C": "float", "log": "false"}, False),
        ("scatter_add.cu", {"T": "__half", "K": "u32"}, True),
    ]
    so, took = compile_so(translation_unit(variants), out_dir, "batch")
    print(f"g++ of the 3-kernel translation unit: {took:.2f} s ({so})")
    driver = os.path.join(out_dir, "driver")
    with open(driver + ".cpp", "w") as f:
        f.write(DRIVER)
    subprocess.run(["g++", "-std=c++17", "-O1", "-o", driver, driver + ".cpp", "-ldl"], check=True)
    start = time.time()
    r = subprocess.run([driver, so])
    print(f"driver wall time {time.time() - start:.2f} s")
    ok = r.returncode == 0
    if "--all" in args:
        total = 0
        for template, vs in all_variants().items():
            tu = translation_unit([(template, subs, half) for subs, half in vs])
            _, took = compile_so(tu, out_dir, "all_" + template.split(".")[0])
            total += len(vs)
            print(f"  compiled {len(vs):3d} variants of {template:15s} in {took:5.1f} s")
        print(f"--all: {total} variants compile")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
