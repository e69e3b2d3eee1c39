#!/usr/bin/env python3
"""PyTorch CUDA twin of `rnn bench gpu --device cuda:0`: the same workload names, sizes,
timing (3 warm-up calls, then >= 0.5 s and >= 5 calls, median; every call synchronized) and
JSON records, so `bench/compare.py ours.json torch.json` gives the side-by-side ratios.

Workloads: op_overhead (us per tiny op, 200 queued then one sync), matmul fp32 / tf32 / bf16
at 1024..8192, linear_relu (relu(F.linear(x, w, b)) at 4096, against our fused Linear),
relu / exp / gelu / add / sum / softmax GB/s, and a device-to-device copy of the same bytes
(the bandwidth reference).
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

MATMUL_SIZES = (1024, 2048, 4096, 8192)
ELEMS = 16 << 20
SOFTMAX = (16384, 1024)


def time_call(fn, warmup=3, min_time=0.5, min_calls=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    start = time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def record(name, metric, value):
    return {"suite": "gpu", "name": name, "metric": metric, "value": value,
            "higher_is_better": metric not in ("ms", "us/op"), "threads": torch.get_num_threads()}


def bench_overhead():
    x = torch.randn(16, device="cuda")
    s = time_call(lambda: [torch.relu(x) for _ in range(200)])
    return [record("op_overhead", "us/op", s / 200 * 1e6)]


def bench_matmul():
    out = []
    for n in MATMUL_SIZES:
        for label, dtype, tf32 in (("f32", torch.float32, False), ("tf32", torch.float32, True),
                                   ("bf16", torch.bfloat16, False)):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            s = time_call(lambda: torch.matmul(a, b))
            out.append(record(f"matmul_{label}_{n}", "GFLOP/s", 2 * n**3 / s / 1e9))
    torch.backends.cuda.matmul.allow_tf32 = False
    return out


def bench_linear(n=MATMUL_SIZES[len(MATMUL_SIZES) // 2]):
    x, w, b = (torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda"), torch.randn(n, device="cuda"))
    s = time_call(lambda: torch.relu(F.linear(x, w, b)))
    return [record(f"linear_relu_f32_{n}", "GFLOP/s", 2 * n**3 / s / 1e9)]


def bench_memory_bound():
    x, y = torch.randn(ELEMS, device="cuda"), torch.randn(ELEMS, device="cuda")
    label = f"{ELEMS >> 20}M"
    rows, cols = SOFTMAX
    s = torch.randn(rows, cols, device="cuda")
    work = [
        (f"unary_relu_{label}", 8 * ELEMS, lambda: torch.relu(x)),
        (f"unary_exp_{label}", 8 * ELEMS, lambda: torch.exp(x)),
        (f"unary_gelu_{label}", 8 * ELEMS, lambda: F.gelu(x, approximate="tanh")),
        (f"binary_add_{label}", 12 * ELEMS, lambda: x + y),
        (f"sum_{label}", 4 * ELEMS, lambda: x.sum()),
        (f"softmax_{rows}x{cols}", 8 * rows * cols, lambda: torch.softmax(s, -1)),
    ]
    out = []
    for name, nbytes, fn in work:
        out.append(record(name, "GB/s", nbytes / time_call(fn) / 1e9))
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        out.append(record(f"device copy:{name}", "GB/s", nbytes / time_call(lambda: dst.copy_(src)) / 1e9))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="write the records to this file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_bench.py needs a CUDA GPU (torch.cuda.is_available() is False)")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    records = bench_overhead() + bench_matmul() + bench_linear() + bench_memory_bound()
    for r in records:
        print(f"{r['name']:<32} {r['value']:>12.2f} {r['metric']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
