#!/usr/bin/env python3
"""Generates grad_scaler.json: torch.amp.GradScaler's decisions for crates/rnn-nn/tests/optim.rs.

Run from anywhere:  python3 crates/rnn-nn/tests/golden/make_grad_scaler_golden.py
Needs torch (any recent 2.x); the Rust test only reads the committed JSON.

A tiny f32 model y = x W^T + b (W [2, 3], b [2]) trains with SGD on the mean squared error
for STEPS steps with a GradScaler of a small growth interval. At the steps listed in
INJECT an inf or NaN is written into one gradient after the backward pass, so the scaler
must skip those steps and back off; the gradients are unscaled and clipped (norm CLIP)
before each step. Recorded (all float32 values, as float64 in JSON):
  config     the scaler's init_scale, growth_factor, backoff_factor, growth_interval
  model      the initial W, b and the data x [8, 3], y [8, 2]
  inject     step -> [parameter index, flat element, value]
  steps      per step: the scale used, whether the optimizer stepped, the scale after update
  final      W and b after the last step
"""

import json
import os

import torch

from golden_json import number

SEED = 20261124
STEPS = 14
LR = 0.1
CLIP = 0.5
CONFIG = {"init_scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3}
# step -> (parameter index (0: W, 1: b), flat element, injected value)
INJECT = {2: (0, 1, float("inf")), 6: (1, 0, float("nan")), 7: (0, 4, float("-inf")), 12: (1, 1, float("inf"))}
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grad_scaler.json")


def flat(t):
    return [number(v) for v in t.detach().double().flatten().tolist()]


def main():
    gen = torch.Generator().manual_seed(SEED)
    rand = lambda *shape: (torch.rand(*shape, generator=gen) * 2 - 1).float()
    w, b, x, y = rand(2, 3), rand(2), rand(8, 3), rand(8, 2)
    model = {"w": flat(w), "b": flat(b), "x": flat(x), "y": flat(y)}
    params = [w.clone().requires_grad_(), b.clone().requires_grad_()]
    opt = torch.optim.SGD(params, lr=LR)
    scaler = torch.amp.GradScaler("cpu", **CONFIG)
    steps = []
    for step in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(x @ params[0].T + params[1], y)
        scale = scaler.get_scale()
        scaler.scale(loss).backward()
        if step in INJECT:
            which, element, value = INJECT[step]
            params[which].grad.view(-1)[element] = value
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        found_inf = sum(v.item() for v in scaler._found_inf_per_device(opt).values()) > 0
        scaler.step(opt)
        scaler.update()
        steps.append({"scale": scale, "stepped": not found_inf, "scale_after": scaler.get_scale()})
    inject = {str(k): [v[0], v[1], number(v[2])] for k, v in INJECT.items()}
    golden = {"torch": torch.__version__, "config": CONFIG, "lr": LR, "clip": CLIP, "model": model,
              "inject": inject, "steps": steps, "final": {"w": flat(params[0]), "b": flat(params[1])}}
    with open(OUT, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
