#!/usr/bin/env python3
"""PyTorch CPU reference for `rnn bench cpu`: same workloads, timing and JSON format."""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

from timing import time_call

N16M = 16 * 1024 * 1024
MATMUL_SIZES = (256, 512, 1024, 2048)




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


# PyTorch's bf16 / f16 CPU matmul falls back to a slow generic kernel on CPUs without AVX-512
# (about 0.5 GFLOP/s on an AVX2-only machine: one 2048 product takes over a minute), so the
# usual timing rule (3 warm-up calls, then >= 5 calls) would run for an hour. A size whose
# single call takes longer than SLOW_CALL_S is timed over two calls; the next size is skipped
# (no row, reported on stderr) once it would take longer than SIZE_BUDGET_S per call.
SLOW_CALL_S = 0.25
SIZE_BUDGET_S = 10.0


def bench_matmul_low_precision(threads):
    """bf16 and f16 square matmuls (torch's CPU kernels accumulate them in f32)."""
    out = []
    for dtype, tag in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
        for n in MATMUL_SIZES:
            a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
            first = time_call(lambda: torch.matmul(a, b), warmup=0, min_time=0, min_calls=1)
            if first > SLOW_CALL_S:
                s = time_call(lambda: torch.matmul(a, b), warmup=0, min_time=0, min_calls=2)
            else:
                s = time_call(lambda: torch.matmul(a, b))
            out.append(record(f"matmul_{tag}_{n}", "GFLOP/s", 2 * n**3 / s / 1e9, threads))
            if s * 8 > SIZE_BUDGET_S and n != MATMUL_SIZES[-1]:
                print(f"matmul_{tag}: {s:.1f} s per call at n={n}; larger sizes skipped",
                      file=sys.stderr)
                break
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

    def step_bf16():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), target)
        model.zero_grad(set_to_none=True)
        loss.backward()

    s_bf16 = time_call(step_bf16)
    return [record("mlp_784_512_256_10_b128", "ms", s * 1e3, threads),
            record("mlp_784_512_256_10_b128_bf16", "ms", s_bf16 * 1e3, threads)]


def bench_fused_nn(threads):
    """LayerNorm, RMSNorm, bias + GELU and cross entropy, forward + backward: PyTorch's own fused ops and the
    compositions of primitives (as in `rnn bench cpu`)."""
    x = torch.randn(8192, 1024, requires_grad=True)
    w = torch.ones(1024, requires_grad=True)
    b = torch.zeros(1024, requires_grad=True)

    def ln_composed():
        c = x - x.mean(-1, keepdim=True)
        var = (c * c).mean(-1, keepdim=True)
        return c / torch.sqrt(var + 1e-5) * w + b

    def rms_composed():
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w

    logits = torch.randn(2048, 8192, requires_grad=True)
    ids = torch.randint(0, 8192, (2048,))

    def ce_composed():
        return -torch.log_softmax(logits, -1).gather(1, ids.unsqueeze(1)).mean()

    cases = [
        ("layer_norm_fused_8192x1024", lambda: F.layer_norm(x, (1024,), w, b, 1e-5).sum()),
        ("layer_norm_composed_8192x1024", lambda: ln_composed().sum()),
        ("rms_norm_fused_8192x1024", lambda: F.rms_norm(x, (1024,), w, 1e-6).sum()),
        ("rms_norm_composed_8192x1024", lambda: rms_composed().sum()),
        # PyTorch has no fused bias + GELU on the CPU: both rows are its add + gelu.
        ("bias_gelu_fused_8192x1024", lambda: F.gelu(x + b, approximate="tanh").sum()),
        ("bias_gelu_composed_8192x1024", lambda: F.gelu(x + b, approximate="tanh").sum()),
        ("cross_entropy_fused_2048x8192", lambda: F.cross_entropy(logits, ids)),
        ("cross_entropy_composed_2048x8192", ce_composed),
    ]
    def step(loss):
        for t in (x, w, b, logits):
            t.grad = None  # rnn's backward returns fresh gradients: no accumulation here either
        loss().backward()

    out = []
    for name, loss in cases:
        s = time_call(lambda: step(loss))
        out.append(record(name, "ms", s * 1e3, threads))
    return out


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
    only = p.add_mutually_exclusive_group()
    only.add_argument("--matmul-only", action="store_true", help="only the f32, bf16 and f16 matmul rows")
    only.add_argument("--memory-only", action="store_true", help="only the elementwise, softmax and sum rows")
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    with torch.no_grad():
        records = []
        if not args.memory_only:
            records += bench_matmul(args.threads) + bench_matmul_low_precision(args.threads)
        if not args.matmul_only:
            records += bench_elementwise(args.threads) + bench_reductions(args.threads)
    if not (args.matmul_only or args.memory_only):
        records += bench_mlp(args.threads) + bench_fused_nn(args.threads)
    print_table(records, args.threads)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=2)
        print(f"wrote {len(records)} records to {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
