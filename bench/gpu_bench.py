#!/usr/bin/env python3
"""PyTorch CUDA twin of `rnn bench gpu --device cuda:0`: the same workload names, sizes,
timing (3 warm-up calls, then >= 0.5 s and >= 5 calls, median; every call synchronized) and
JSON records, so `bench/compare.py ours.json torch.json` gives the side-by-side ratios.

Workloads: op_add16_enqueue / op_add16 (us per add of two 16-element tensors, 500 queued:
host time before the sync, and time to the sync), mlp_step_b128 (784-512-256-10, cross
entropy, Adam: forward, backward, step) with its enqueue share, adamw_10M (one
torch.optim.AdamW(fused=True) step over 10M f32 parameters, GB/s of the 28 bytes per
parameter it moves, and its ms), matmul fp32 / tf32 / bf16 at 1024..8192, linear_relu
(relu(F.linear(x, w, b)) at 4096, against our fused Linear), relu / exp / gelu / add / sum /
softmax GB/s, and a device-to-device copy of the same bytes (the bandwidth reference).

`--device cpu` runs the engine rows only (op overhead, MLP step, AdamW with foreach=True,
the multi-tensor CPU path; reference: a memcpy of the same bytes), the twin of the
`rnn bench train --device cpu` AdamW row and of the CPU columns of `rnn bench gpu`.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from timing import time_call

MATMUL_SIZES = (1024, 2048, 4096, 8192)
TINY_OPS = 500
ADAM_PARAMS = 10_000_000
ADAM_BYTES_PER_PARAM = 28  # read p, g, m, v; write p, m, v
ELEMS = 16 << 20
SOFTMAX = (16384, 1024)


DEVICE = "cuda"


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()




def time_queued(fn, calls, warmup=3, min_time=0.5, min_calls=5):
    """Median (enqueue, total) seconds per call of `calls` calls: enqueue read before the
    sync, total after one sync; the device is idle when each sample starts."""
    def sample():
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        enqueue = time.perf_counter() - t0
        sync()
        return enqueue, time.perf_counter() - t0
    for _ in range(warmup):
        sample()
    enq, tot = [], []
    start = time.perf_counter()
    while len(tot) < min_calls or time.perf_counter() - start < min_time:
        e, t = sample()
        enq.append(e)
        tot.append(t)
    return statistics.median(enq) / calls, statistics.median(tot) / calls


def record(name, metric, value):
    return {"suite": "gpu", "name": name, "metric": metric, "value": value,
            "higher_is_better": metric not in ("ms", "us/op"), "threads": torch.get_num_threads()}


def bench_overhead():
    a, b = torch.randn(16, device=DEVICE), torch.randn(16, device=DEVICE)
    enqueue, total = time_queued(lambda: a + b, TINY_OPS)
    return [record("op_add16_enqueue", "us/op", enqueue * 1e6), record("op_add16", "us/op", total * 1e6)]


def bench_mlp_step(batch=128):
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(DEVICE)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.rand(batch, 784, device=DEVICE)
    targets = (torch.arange(batch, device=DEVICE) * 7) % 10

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), targets).backward()
        opt.step()
    enqueue, total = time_queued(step, 1)
    return [record(f"mlp_step_b{batch}", "ms", total * 1e3), record(f"mlp_step_b{batch}_enqueue", "ms", enqueue * 1e3)]


def bench_adamw(n=ADAM_PARAMS):
    p = torch.nn.Parameter(torch.randn(n, device=DEVICE))
    p.grad = torch.randn(n, device=DEVICE) * 1e-2
    fused = DEVICE == "cuda"
    opt = torch.optim.AdamW([p], lr=1e-3, fused=fused, foreach=not fused)
    s = time_call(opt.step, sync=sync)
    nbytes = ADAM_BYTES_PER_PARAM * n
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    copy = time_call(lambda: dst.copy_(src), sync=sync)
    label = f"adamw_{n // 1_000_000}M"
    reference = "device copy" if DEVICE == "cuda" else "memcpy"
    return [record(label, "GB/s", nbytes / s / 1e9), record(f"{label}_ms", "ms", s * 1e3),
            record(f"{reference}:{label}", "GB/s", nbytes / copy / 1e9)]


def bench_matmul():  # CUDA only
    out = []
    for n in MATMUL_SIZES:
        for label, dtype, tf32 in (("f32", torch.float32, False), ("tf32", torch.float32, True),
                                   ("bf16", torch.bfloat16, False)):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            s = time_call(lambda: torch.matmul(a, b), sync=sync)
            out.append(record(f"matmul_{label}_{n}", "GFLOP/s", 2 * n**3 / s / 1e9))
    torch.backends.cuda.matmul.allow_tf32 = False
    return out


def bench_linear(n=MATMUL_SIZES[len(MATMUL_SIZES) // 2]):
    x, w, b = (torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda"), torch.randn(n, device="cuda"))
    s = time_call(lambda: torch.relu(F.linear(x, w, b)), sync=sync)
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
        out.append(record(name, "GB/s", nbytes / time_call(fn, sync=sync) / 1e9))
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        out.append(record(f"device copy:{name}", "GB/s", nbytes / time_call(lambda: dst.copy_(src), sync=sync) / 1e9))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="write the records to this file")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: the engine rows only (op overhead, MLP step, AdamW foreach)")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_bench.py needs a CUDA GPU (torch.cuda.is_available() is False); try --device cpu")
    where = torch.cuda.get_device_name(0) if DEVICE == "cuda" else f"the CPU, {torch.get_num_threads()} threads"
    print(f"torch {torch.__version__} on {where}")
    records = bench_overhead() + bench_mlp_step() + bench_adamw()
    if DEVICE == "cuda":
        records += bench_matmul() + bench_linear() + bench_memory_bound()
    for r in records:
        print(f"{r['name']:<32} {r['value']:>12.2f} {r['metric']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
