#!/usr/bin/env python3
"""PyTorch twin of `rnn bench attention`: torch.nn.functional.scaled_dot_product_attention on
the CPU, forward and forward + backward, B=4 H=8 D=64, N in 256/1024/4096, causal and not,
plus the attention of the GPT training step (B=32 H=4 N=64 D=32, causal), f32; same timing
(1 warm-up call, then >= 0.5 s and >= 3 calls, median), names and JSON.

Peak extra memory: torch's CPU allocator is not counted by Python, so the peak resident set
is used: /proc/self/clear_refs resets VmHWM, one call runs, and VmHWM - VmRSS(before) is its
peak growth (Linux only), read while the call's results (the output; the three gradients)
are still alive, as `rnn bench attention --rss` reads it. (Read after they are freed, the
high-water mark that the kernel recorded at their unmapping came out below the output's own
size: 848-880 KB for the GPT shape's 1024 KB output.) glibc would serve a call's buffers from memory freed by the calls
before it (already resident, so invisible), so the memory is measured in a child process with
MALLOC_MMAP_THRESHOLD_=65536: every buffer above 64 KiB is then mapped on allocation and
unmapped on free, and the resident peak is the peak of live buffers (to a page). The timing
runs in this process, with the allocator as installed.

That resident-set peak misses what glibc serves below the threshold from pages already
resident, such as a kernel's per-thread scratch. So torch's live heap is counted too, as
rnn's is: the profiler's memory events (`profile_memory=True`: every allocation and free of
torch's CPU allocator, the scratch of the attention kernels included) summed in time order,
their peak while the call runs. The attnmem_ rows (rnn's live heap) compare with that, the
attnrss_ rows (rnn's resident-set growth) with the resident-set peak.
"""
import argparse
import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

from timing import time_call

B, H, D = 4, 8, 64
# The attention of the GPT training step (bench/gpt_twin.py): batch, heads, context, head dim.
GPT = (32, 4, 64, 32)


def status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def heap_peak_bytes(fn):
    """The peak of torch's live CPU allocations above those before, while `fn` runs."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        results = fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        live += e.nbytes()  # negative for a free
        peak = max(peak, live)
    del results
    return peak


def peak_extra_bytes(fn):
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current resident set
    before = status_kb("VmRSS")
    results = fn()
    peak = max(0, status_kb("VmHWM") - before) * 1024
    del results
    return peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        return memory_child(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    lengths = (64, 256) if args.quick else (256, 1024, 4096)
    peaks = memory_in_child(args)
    print(f"torch {torch.__version__} attention benchmark (CPU, f32, B={B} H={H} D={D}), threads={threads}")
    print(f"{'name':<30} {'ms/call':>10} {'GFLOP/s':>10} {'heap MB':>10} {'rss MB':>10}")
    print("-" * 74)
    records = []
    for name, fl, fn in workloads(lengths):
        s = time_call(fn, warmup=1, min_calls=3)
        peak = peaks[name]
        gflops = fl / s / 1e9
        print(f"{name:<30} {s * 1e3:>10.2f} {gflops:>10.2f} {peak['heap'] / 1e6:>10.2f} {peak['rss'] / 1e6:>10.2f}",
              flush=True)
        rec = {"suite": "attention", "threads": threads}
        records.append({**rec, "name": name, "metric": "GFLOP/s", "value": gflops, "higher_is_better": True})
        # Live heap against rnn's live-heap count (attnmem_); resident-set growth against
        # rnn's taken the same way (attnrss_, `rnn bench attention --rss`).
        for prefix, key in (("attnmem_", "heap"), ("attnrss_", "rss")):
            records.append({**rec, "name": name.replace("attn_", prefix, 1), "metric": "MB",
                            "value": peak[key] / 1e6, "higher_is_better": False})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


def memory_in_child(args):
    """{name: peak extra bytes}, measured by this script in a child process (see the top)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--memory-child"]
    cmd += ["--threads", str(torch.get_num_threads())] + (["--quick"] if args.quick else [])
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def memory_child(args):
    torch.set_num_threads(args.threads)
    lengths = (64, 256) if args.quick else (256, 1024, 4096)
    peaks = {}
    for name, _, fn in workloads(lengths):
        fn()  # warm-up: thread pool, lazily built state
        peaks[name] = {"rss": peak_extra_bytes(fn), "heap": heap_peak_bytes(fn)}
    print(json.dumps(peaks))


def shapes(lengths):
    """(batch, heads, n, d, causal masks, name prefix) of every shape."""
    for n in lengths:
        yield B, H, n, D, (False, True), f"n{n}"
    b, h, n, d = GPT
    yield b, h, n, d, (True,), f"gpt_b{b}h{h}n{n}d{d}"


def workloads(lengths):
    """(name, flops, fn) of every workload."""
    torch.manual_seed(0)
    for b, h, n, d, causals, prefix in shapes(lengths):
        q, k, v = (torch.randn(b, h, n, d) for _ in range(3))
        for causal in causals:
            tag = f"{prefix}{'_causal' if causal else ''}"
            flops = 4.0 * b * h * d * n * n / (2 if causal else 1)

            def forward():
                with torch.no_grad():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            def both():
                qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
                F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal).sum().backward()
                return qg.grad, kg.grad, vg.grad

            yield f"attn_fwd_{tag}", flops, forward
            yield f"attn_fwdbwd_{tag}", 3.5 * flops, both


if __name__ == "__main__":
    main()
