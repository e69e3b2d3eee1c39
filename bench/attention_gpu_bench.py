#!/usr/bin/env python3
"""PyTorch twin of fused attention on a GPU: torch.nn.functional.scaled_dot_product_attention
with the flash backend in bf16, forward and forward + backward TFLOP/s, for B=4 H=8,
N in {1024, 4096, 16384}, D in {64, 128}, causal and not.

FLOPs are counted as FlashAttention-2's paper counts them: the forward is two N x N x D
products per (batch, head), 4 * B * H * N^2 * D, halved for a causal mask; the backward
is 2.5 times the forward. Timing: 3 warm-up calls, then >= 0.5 s and >= 5 calls, median,
every call synchronized. Records are JSON (`--json`) as bench/compare.py reads them:
attention_{fwd,bwd,bwd_atomic}_n{N}_d{D}_{causal,full}, metric TFLOP/s (bwd: the backward alone,
forward + backward time minus forward time).

`--device cpu --small` runs the same code on the CPU at N in {128, 256} with the math
backend (a check of the script, not a benchmark).
"""
import argparse
import json

import torch
import torch.nn.functional as F

from timing import time_call

BATCH, HEADS = 4, 8


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()




def flops_forward(n, d, causal):
    f = 4.0 * BATCH * HEADS * n * n * d
    return f / 2 if causal else f


def measure(n, d, causal, device, dtype):
    shape = (BATCH, HEADS, n, d)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(shape, device=device, dtype=dtype)

    def forward():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def forward_backward():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out.backward(grad)

    fwd = time_call(forward, sync=lambda: sync(device))
    both = time_call(forward_backward, sync=lambda: sync(device))
    bwd = max(both - fwd, 1e-12)
    f = flops_forward(n, d, causal)
    return fwd, bwd, f / fwd / 1e12, 2.5 * f / bwd / 1e12


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--small", action="store_true", help="N in {128, 256} (script check)")
    ap.add_argument("--json", action="store_true", help="print JSON records only")
    args = ap.parse_args()
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("error: no CUDA device (use --device cpu --small to check the script)")
        backend = torch.nn.attention.SDPBackend.FLASH_ATTENTION
        dtype = torch.bfloat16
    else:
        backend = torch.nn.attention.SDPBackend.MATH
        dtype = torch.float32
    sizes = (128, 256) if args.small else (1024, 4096, 16384)
    records = []
    with torch.nn.attention.sdpa_kernel(backend):
        for d in (64, 128):
            for n in sizes:
                for causal in (False, True):
                    fwd, bwd, fwd_tf, bwd_tf = measure(n, d, causal, args.device, dtype)
                    tag = f"n{n}_d{d}_{'causal' if causal else 'full'}"
                    records.append({"name": f"attention_fwd_{tag}", "metric": "TFLOP/s", "value": fwd_tf})
                    records.append({"name": f"attention_bwd_{tag}", "metric": "TFLOP/s", "value": bwd_tf})
                    # flash's backward adds dq with atomics, as rnn's optional atomic-dq
                    # backward (`rnn bench attention` times both): the same reference.
                    records.append({"name": f"attention_bwd_atomic_{tag}", "metric": "TFLOP/s", "value": bwd_tf})
                    if not args.json:
                        print(f"{tag:24} fwd {fwd * 1e3:9.3f} ms {fwd_tf:7.2f} TFLOP/s   "
                              f"bwd {bwd * 1e3:9.3f} ms {bwd_tf:7.2f} TFLOP/s")
    if args.json:
        print(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
