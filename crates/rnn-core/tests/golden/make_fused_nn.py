#!/usr/bin/env python3
"""PyTorch golden values for the fused ops of rnn-core (`../fused_nn.rs`, test `golden_*`):
F.layer_norm, F.rms_norm, F.cross_entropy (reduction="none", ignore_index, label_smoothing)
and gelu(x + b) (tanh and erf), with the gradients of sum(out * w). Deterministic: fixed
seed, float64, CPU; inputs are multiples of 2^-10 (exact in f32).

    /work/torchenv/bin/python crates/rnn-core/tests/golden/make_fused_nn.py
"""
import json
import pathlib
import platform

import torch
import torch.nn.functional as F

torch.manual_seed(20261124)
OUT = pathlib.Path(__file__).with_name("fused_nn.json")


def grid(*shape, scale=2.0):
    """Uniform in (-scale, scale), rounded to multiples of 2^-10."""
    x = (torch.rand(*shape, dtype=torch.float64) * 2 - 1) * scale
    return torch.round(x * 1024) / 1024


def stored(t, dtype=None):
    d = {"shape": list(t.shape), "data": [float(v) for v in t.detach().reshape(-1).tolist()]}
    if dtype:
        d["dtype"] = dtype
    return d


def case(name, op, params, inputs, fn, ids=None):
    """Runs fn(**inputs) (float inputs tracked), stores output, weights and gradients."""
    leaves = {k: v.clone().requires_grad_(True) for k, v in inputs.items()}
    args = dict(leaves)
    if ids is not None:
        args["targets"] = ids
    out = fn(**args)
    w = grid(*out.shape, scale=1.0) + 1.5
    (out * w).sum().backward()
    stored_inputs = {k: stored(v) for k, v in inputs.items()}
    if ids is not None:
        stored_inputs["targets"] = stored(ids, "i64")
    return {
        "name": name, "op": op, "params": params, "inputs": stored_inputs,
        "outputs": {"out": stored(out)}, "w": {"out": stored(w)},
        "grads": {k: stored(v.grad) for k, v in leaves.items()},
    }


def norm_cases():
    cases = []
    x = grid(3, 7) * 2 + 0.5
    w, b = grid(7) + 1, grid(7)
    ln = lambda eps: (lambda x, weight=None, bias=None: F.layer_norm(x, (x.shape[-1],), weight, bias, eps))
    cases.append(case("layer_norm_affine", "layer_norm", {"eps": 1e-5}, {"x": x, "weight": w, "bias": b}, ln(1e-5)))
    cases.append(case("layer_norm_plain_3d", "layer_norm", {"eps": 1e-3}, {"x": grid(2, 3, 5)}, ln(1e-3)))
    rms = lambda eps: (lambda x, weight=None: F.rms_norm(x, (x.shape[-1],), weight, eps))
    cases.append(case("rms_norm_weight", "rms_norm", {"eps": 1e-6}, {"x": x, "weight": w}, rms(1e-6)))
    cases.append(case("rms_norm_plain", "rms_norm", {"eps": 1e-5}, {"x": grid(4, 6)}, rms(1e-5)))
    return cases


def cross_entropy_cases():
    cases = []
    ids = torch.tensor([0, 4, -100, 2, 1], dtype=torch.int64)
    for s in (0.0, 0.2):
        fn = lambda x, targets, s=s: F.cross_entropy(x, targets, reduction="none", ignore_index=-100,
                                                    label_smoothing=s)
        cases.append(case(f"cross_entropy_s{s}", "cross_entropy", {"label_smoothing": s, "ignore_index": -100},
                          {"x": grid(5, 6, scale=4.0)}, fn, ids))
    big = grid(3, 9, scale=1.0) * 40
    fn = lambda x, targets: F.cross_entropy(x, targets, reduction="none")
    cases.append(case("cross_entropy_large_logits", "cross_entropy", {"label_smoothing": 0.0},
                      {"x": big}, fn, torch.tensor([3, 0, 8])))
    return cases


def bias_gelu_cases():
    x, b = grid(2, 3, 8, scale=3.0), grid(8)
    return [case(f"bias_gelu_{a}", "bias_gelu", {"approximate": a}, {"x": x, "bias": b},
                 lambda x, bias, a=a: F.gelu(x + bias, approximate=a)) for a in ("tanh", "none")]


def main():
    data = {
        "torch_version": torch.__version__, "python_version": platform.python_version(),
        "cases": norm_cases() + cross_entropy_cases() + bias_gelu_cases(),
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {len(data['cases'])} cases to {OUT}")


if __name__ == "__main__":
    main()
