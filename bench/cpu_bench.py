#!/usr/bin/env python3
"""PyTorch CPU reference for `rnn bench cpu`: same workloads, timing and JSON format."""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

N16M = 16 * 1024 * 1024
MATMUL_SIZES = (256, 512, 1024, 2048)


def time_call(fn, warmup=3, min_time=0.5, min_calls=5):
    """3 warm-up calls, then repeat until >= min_time s and >= min_calls; median seconds."""
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def record(name, metric, value, threads):
    return {"suite": "cpu", "name": name, "metric": metric, "value": value,
            "higher_is_better": metric != "ms", "threads": threads}


def bench_matmul(threads):
    out = []
    for n in MATMUL_SIZES:
        a, b = torch.randn(n, n), torch.randn(n, n)
        s = time_call(lambda: torch.matmul(a, b))
        out.append(record(f"matmul_f32_{n}", "GFLOP/s", 2 * n**3 / s / 1e9, threads))
    return out


def bench_elementwise(threads):
    x, y = torch.randn(N16M), torch.randn(N16M)
    unary = {"relu": torch.relu, "exp": torch.exp, "tanh": torch.tanh,
             "gelu": lambda t: F.gelu(t, approximate="tanh")}
    out = []
    for name, op in unary.items():
        s = time_call(lambda: op(x))
        out.append(record(f"unary_{name}_16M", "GB/s", 2 * 4 * N16M / s / 1e9, threads))
    for name, op in {"add": torch.add, "mul": torch.mul}.items():
        s = time_call(lambda: op(x, y))
        out.append(record(f"binary_{name}_16M", "GB/s", 3 * 4 * N16M / s / 1e9, threads))
    return out


def bench_reductions(threads):
    x = torch.randn(16384, 1024)
    s = time_call(lambda: torch.softmax(x, dim=-1))
    out = [record("softmax_16M", "GB/s", 2 * 4 * N16M / s / 1e9, threads)]
    flat = torch.randn(N16M)
    s = time_call(lambda: flat.sum())
    out.append(record("sum_16M", "GB/s", 4 * N16M / s / 1e9, threads))
    return out


def bench_mlp(threads):
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 10))
    x, target = torch.randn(128, 784), torch.randint(0, 10, (128,))

    def step():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), target).backward()

    s = time_call(step)
    return [record("mlp_784_512_256_10_b128", "ms", s * 1e3, threads)]


def print_table(records, threads):
    print(f"PyTorch {torch.__version__} CPU benchmark, threads={threads}")
    print(f"{'name':<28} {'value':>12}  metric")
    print("-" * 50)
    for r in records:
        print(f"{r['name']:<28} {r['value']:>12.3f}  {r['metric']}")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--json", metavar="FILE", help="write records as a JSON list")
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    with torch.no_grad():
        records = (bench_matmul(args.threads) + bench_elementwise(args.threads)
                   + bench_reductions(args.threads))
    records += bench_mlp(args.threads)
    print_table(records, args.threads)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=2)
        print(f"wrote {len(records)} records to {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
