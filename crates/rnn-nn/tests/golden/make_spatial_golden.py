#!/usr/bin/env python3
"""Generates spatial.json: PyTorch reference values for crates/rnn-nn/tests/spatial_layers.rs.

Regenerate (from anywhere; needs torch, any recent version):

    python3 crates/rnn-nn/tests/golden/make_spatial_golden.py

The Rust test only reads the committed JSON. Everything runs in float64 on the CPU with a
fixed seed, so the output is deterministic for a given torch version (recorded in the JSON).

Each case builds one torch.nn layer with PyTorch's own classes, sets its parameters to the
stored values, runs it on the stored input and records:
  out      the forward output
  w        fixed random weights of the loss sum(out * w)
  grads    d loss / d tensor for the input (unless integer ids) and every parameter
  buffers  for BatchNorm: the running statistics after the forward pass
Inputs, parameters, buffers before the pass and `w` are multiples of 2^-10 (exact in decimal).
Max-pool inputs are distinct values, so no window has a tie, except in the `ties` cases:
small integers (many ties) or one value everywhere, where PyTorch routes each window's
gradient to the first max in scan order.

Case format:
  {"name": ..., "layer": {"kind": "conv2d" | "max_pool2d" | "avg_pool2d" | "batch_norm1d" |
                          "batch_norm2d" | "layer_norm" | "embedding", ...options},
   "tensors": {"x": T, "weight": T, "bias": T, "running_mean": T, "running_var": T},
   "out": T, "w": T, "grads": {"x": T, "weight": T, ...}, "buffers": {"running_mean": T, ...}}
with T = {"shape": [...], "data": [...]} (flat, row-major). Absent tensors are omitted.
"""

import json
import os
import platform

import torch

from golden_json import number

SEED = 20261121
STEP = 2.0 ** -10
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spatial.json")
F64 = torch.float64

GEN = torch.Generator().manual_seed(SEED)


def grid(t):
    return torch.round(t / STEP) * STEP


def rand(*shape, lo=-2.0, hi=2.0):
    return grid(torch.rand(*shape, generator=GEN, dtype=F64) * (hi - lo) + lo)


def distinct(*shape):
    """Distinct multiples of 2^-7 centred on 0: no ties for max pooling."""
    n = 1
    for d in shape:
        n *= d
    perm = torch.randperm(n, generator=GEN).to(F64)
    return ((perm - n // 2) * (STEP * 8)).reshape(shape)


def enc(t):
    t = t.detach()
    return {"shape": list(t.shape), "data": [number(float(v)) if t.is_floating_point() else int(v) for v in t.flatten()]}


CASES = []


def run_case(name, layer_json, module, x, params, buffers=(), x_is_ids=False):
    """Runs `module` on `x` after copying `params` (name -> tensor) into it."""
    tensors = {"x": enc(x)}
    with torch.no_grad():
        for pname, value in list(params.items()) + [(b, getattr(module, b).clone()) for b in buffers]:
            if pname in params:
                getattr(module, pname).copy_(value)
            tensors[pname] = enc(getattr(module, pname))
    if not x_is_ids:
        x = x.clone().requires_grad_(True)
    out = module(x)
    w = rand(*out.shape, lo=0.5, hi=1.5)
    (out * w).sum().backward()
    grads = {} if x_is_ids else {"x": enc(x.grad)}
    for pname, p in module.named_parameters():
        grads[pname] = enc(p.grad)
    case = {"name": name, "layer": layer_json, "tensors": tensors, "out": enc(out), "w": enc(w), "grads": grads}
    if buffers:
        case["buffers"] = {b: enc(getattr(module, b)) for b in buffers}
    CASES.append(case)


def conv(name, n, cin, cout, hw, kernel, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, bias=True):
    m = torch.nn.Conv2d(cin, cout, kernel, stride, padding, dilation, groups, bias, dtype=F64)
    params = {"weight": rand(cout, cin // groups, *kernel)}
    if bias:
        params["bias"] = rand(cout)
    layer = {"kind": "conv2d", "kernel": list(kernel), "stride": list(stride), "padding": list(padding),
             "dilation": list(dilation), "groups": groups, "bias": bias}
    run_case(name, layer, m, rand(n, cin, *hw), params)


def ties(*shape):
    """Integers in 0..3: most windows hold several maxima."""
    return torch.randint(0, 3, shape, generator=GEN).to(F64)


def pool(name, kind, shape, kernel, stride=None, padding=(0, 0), dilation=(1, 1), values=distinct, special=None):
    """`values`: how max-pool inputs are drawn; `special`: (index, value) pairs written into the
    input (NaN, infinities)."""
    if kind == "max_pool2d":
        m = torch.nn.MaxPool2d(kernel, stride, padding, dilation)
        x = values(*shape)
    else:
        m = torch.nn.AvgPool2d(kernel, stride, padding, count_include_pad=True)
        x = rand(*shape)
    for index, value in special or ():
        x[index] = value
    layer = {"kind": kind, "kernel": list(kernel), "stride": list(stride) if stride else None,
             "padding": list(padding), "dilation": list(dilation)}
    run_case(name, layer, m, x, {})


def batch_norm(name, kind, shape, training, momentum=0.1, eps=1e-5):
    c = shape[1]
    cls = torch.nn.BatchNorm1d if kind == "batch_norm1d" else torch.nn.BatchNorm2d
    m = cls(c, eps=eps, momentum=momentum, dtype=F64)
    with torch.no_grad():
        m.running_mean.copy_(rand(c, lo=-0.5, hi=0.5))
        m.running_var.copy_(rand(c, lo=0.5, hi=1.5))
    m.train(training)
    layer = {"kind": kind, "training": training, "momentum": momentum, "eps": eps}
    params = {"weight": rand(c, lo=0.5, hi=1.5), "bias": rand(c)}
    run_case(name, layer, m, rand(*shape), params, buffers=("running_mean", "running_var"))


def layer_norm(name, shape, normalized_shape, eps=1e-5, special=None):
    m = torch.nn.LayerNorm(normalized_shape, eps=eps, dtype=F64)
    layer = {"kind": "layer_norm", "normalized_shape": list(normalized_shape), "eps": eps}
    params = {"weight": rand(*normalized_shape, lo=0.5, hi=1.5), "bias": rand(*normalized_shape)}
    x = rand(*shape)
    for index, value in special or ():
        x[index] = value
    run_case(name, layer, m, x, params)


def embedding(name, num, dim, ids):
    m = torch.nn.Embedding(num, dim, dtype=F64)
    run_case(name, {"kind": "embedding"}, m, ids, {"weight": rand(num, dim)}, x_is_ids=True)


def main():
    conv("conv_plain", 2, 3, 4, (5, 6), (3, 3))
    conv("conv_stride2_pad1", 2, 2, 3, (6, 7), (3, 2), stride=(2, 2), padding=(1, 1))
    conv("conv_dilation2_groups2", 1, 4, 6, (7, 6), (3, 3), padding=(1, 2), dilation=(2, 2), groups=2)
    conv("conv_mixed_no_bias", 2, 4, 4, (6, 5), (2, 3), stride=(2, 1), padding=(1, 0), dilation=(1, 2),
         groups=4, bias=False)
    conv("conv_1x1", 2, 3, 2, (3, 4), (1, 1))
    pool("max_pool_2", "max_pool2d", (2, 3, 6, 5), (2, 2))
    pool("max_pool_3_s2_p1", "max_pool2d", (2, 2, 7, 6), (3, 3), stride=(2, 2), padding=(1, 1))
    pool("max_pool_dilated", "max_pool2d", (1, 2, 7, 7), (3, 2), stride=(1, 2), padding=(1, 1), dilation=(2, 1))
    pool("max_pool_2_p1", "max_pool2d", (1, 2, 5, 6), (2, 2), padding=(1, 1))
    pool("avg_pool_2", "avg_pool2d", (2, 3, 6, 5), (2, 2))
    pool("avg_pool_3x2_p1", "avg_pool2d", (1, 2, 7, 5), (3, 2), padding=(1, 1))
    pool("avg_pool_3_s2_p1", "avg_pool2d", (2, 2, 7, 6), (3, 3), stride=(2, 2), padding=(1, 1))
    batch_norm("batch_norm1d_2d_train", "batch_norm1d", (5, 3), True)
    batch_norm("batch_norm1d_3d_train", "batch_norm1d", (4, 3, 5), True, momentum=0.3)
    batch_norm("batch_norm1d_eval", "batch_norm1d", (4, 3, 5), False)
    batch_norm("batch_norm2d_train", "batch_norm2d", (3, 2, 4, 5), True, eps=1e-3)
    batch_norm("batch_norm2d_eval", "batch_norm2d", (3, 2, 4, 5), False)
    layer_norm("layer_norm_last", (2, 3, 4), (4,))
    layer_norm("layer_norm_last2", (2, 3, 4), (3, 4), eps=1e-3)
    embedding("embedding", 7, 3, torch.tensor([[0, 3, 3], [6, 1, 3]], dtype=torch.int64))
    # Ties (appended last, so the cases above keep their random draws).
    pool("max_pool_ties_2", "max_pool2d", (2, 2, 6, 4), (2, 2), values=ties)
    pool("max_pool_ties_overlap_3_s1", "max_pool2d", (1, 2, 6, 5), (3, 3), stride=(1, 1), values=ties)
    pool("max_pool_ties_overlap_3_s2_p1", "max_pool2d", (2, 1, 7, 6), (3, 3), stride=(2, 2), padding=(1, 1),
         values=ties)
    pool("max_pool_all_equal_overlap", "max_pool2d", (1, 2, 5, 5), (2, 3), stride=(1, 2),
         values=lambda *s: torch.full(s, 0.75, dtype=F64))
    # NaN and infinities: a window with a NaN gives NaN and routes its gradient to the NaN, +inf
    # wins its window, -inf loses; an average with inf is inf, with inf and -inf NaN. A NaN or
    # inf in a normalized row makes that row NaN, and only that row.
    nan, inf = float("nan"), float("inf")
    special = [((0, 0, 0, 1), nan), ((0, 0, 3, 3), inf), ((0, 1, 2, 2), -inf), ((0, 1, 4, 4), nan)]
    pool("max_pool_nonfinite", "max_pool2d", (1, 2, 6, 5), (2, 2), special=special)
    pool("max_pool_nonfinite_p1", "max_pool2d", (1, 2, 6, 5), (3, 3), stride=(2, 2), padding=(1, 1),
         special=special)
    pool("avg_pool_nonfinite", "avg_pool2d", (1, 2, 6, 5), (2, 2),
         special=special + [((0, 0, 3, 2), -inf), ((0, 1, 0, 0), inf)])
    layer_norm("layer_norm_nonfinite", (3, 4), (4,), special=[((0, 1), nan), ((2, 3), inf)])
    doc = {"format": 1, "torch_version": torch.__version__, "python_version": platform.python_version(),
           "seed": SEED, "cases": CASES}
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(CASES)} cases to {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
