#!/usr/bin/env python3
"""Writes attention.json: torch.nn.functional.scaled_dot_product_attention reference values
for crates/rnn-core/tests/attention.rs (`golden_fixtures`).

Run from anywhere:  python3 crates/rnn-core/tests/golden/attention_fixtures.py
Needs torch >= 2.5 (a fully masked row gives a zero output and zero gradients); the Rust test
only reads the committed JSON.

Each case is computed by torch in float64 on the CPU from inputs on a 2^-10 grid (exact in
f32); the Rust test runs it in f32 (and in f64 where the device has it) against these values.
Masks are given to torch the way PyTorch users write them: `is_causal=True`, a boolean
`attn_mask` for key padding (True = attend), an additive float `attn_mask` for a bias, and,
since torch takes no `attn_mask` together with `is_causal`, a combined boolean or float mask
for causal + padding / bias. The Rust side gets the same masks as an `AttentionMask`.

Case format:
  name, causal (bool), scale (float or null), lengths ([B] or null), bias_grad (bool)
  inputs   {"q", "k", "v"[, "bias"]}: {"shape", "data"}
  outputs  {"o": T};  w  {"o": T}: the weights of the loss sum(o * w)
  grads    {"q", "k", "v"[, "bias"]}: d loss / d input
"""

import json
import os
import platform

import torch
import torch.nn.functional as F

SEED = 20261124
STEP = 2.0 ** -10
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention.json")
GEN = torch.Generator().manual_seed(SEED)
F64 = torch.float64


def rand(shape, lo=-1.5, hi=1.5):
    t = lo + (hi - lo) * torch.rand(shape, generator=GEN, dtype=F64)
    return torch.round(t / STEP) * STEP


def stored(t):
    return {"shape": list(t.shape), "data": [float(x) for x in t.detach().reshape(-1).tolist()]}


def case(name, b, h, nq, nk, d, dv, causal=False, lengths=None, bias_shape=None, bias_grad=False, scale=None):
    q, k, v = rand((b, h, nq, d)), rand((b, h, nk, d)), rand((b, h, nk, dv), -1.0, 1.0)
    bias = rand(bias_shape, -1.0, 1.0) if bias_shape else None
    leaves = [t.requires_grad_() for t in (q, k, v)]
    if bias is not None and bias_grad:
        bias.requires_grad_()
    keys = torch.arange(nk)
    visible = torch.ones(b, 1, nq, nk, dtype=torch.bool)
    if lengths is not None:
        visible = visible & (keys.reshape(1, 1, 1, nk) < torch.tensor(lengths).reshape(b, 1, 1, 1))
    if causal and (lengths is not None or bias is not None):
        visible = visible & (keys.reshape(1, 1, 1, nk) <= torch.arange(nq).reshape(1, 1, nq, 1))
    if bias is not None:
        mask = bias.masked_fill(~visible, float("-inf")) if (causal or lengths) else bias
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    elif lengths is not None:
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=scale)
    else:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    w = rand(o.shape, 0.5, 1.5)
    (o * w).sum().backward()
    inputs = {"q": stored(q), "k": stored(k), "v": stored(v)}
    grads = {"q": stored(q.grad), "k": stored(k.grad), "v": stored(v.grad)}
    if bias is not None:
        inputs["bias"] = stored(bias)
        if bias_grad:
            grads["bias"] = stored(bias.grad)
    return {
        "name": name, "causal": causal, "scale": scale, "lengths": lengths, "bias_grad": bias_grad,
        "inputs": inputs, "outputs": {"o": stored(o)}, "w": {"o": stored(w)}, "grads": grads,
    }


def main():
    cases = [
        case("plain", 2, 2, 7, 9, 16, 16),
        case("causal_square", 1, 2, 33, 33, 32, 32, causal=True),
        case("causal_nq_gt_nk", 1, 1, 12, 5, 8, 8, causal=True),
        case("causal_nq_lt_nk", 1, 1, 5, 12, 8, 6, causal=True),
        case("padding_bool_mask", 3, 1, 6, 10, 8, 8, lengths=[0, 4, 10]),
        case("causal_padding", 2, 2, 9, 9, 8, 8, causal=True, lengths=[3, 9]),
        case("bias_full", 2, 2, 6, 7, 8, 8, bias_shape=(2, 2, 6, 7), bias_grad=True),
        case("bias_broadcast", 2, 3, 5, 8, 8, 8, bias_shape=(3, 1, 8), bias_grad=True, scale=0.3),
        case("bias_causal", 1, 2, 10, 10, 16, 8, causal=True, bias_shape=(1, 2, 10, 10), bias_grad=True),
        case("tile_plus_one", 1, 1, 65, 65, 16, 16, causal=True),
    ]
    doc = {"format": 1, "torch_version": torch.__version__, "python_version": platform.python_version(),
           "seed": SEED, "cases": cases}
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
