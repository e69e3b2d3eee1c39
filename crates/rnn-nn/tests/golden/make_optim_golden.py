#!/usr/bin/env python3
"""Generates optim.json: PyTorch reference values for crates/rnn-nn/tests/optim.rs.

Run from anywhere:  python3 crates/rnn-nn/tests/golden/make_optim_golden.py
Needs torch (any recent 2.x); the Rust test only reads the committed JSON.

Contents (all float64, CPU):
  model       the initial parameters of a tiny net  y = tanh(x W1^T + b1) W2^T + b2
              (W1 [4, 3], b1 [4], W2 [2, 4], b2 [2]) and the data x [6, 3], y [6, 2];
              the loss is the mean squared error.
  optimizers  per case: the optimizer name, its options (PyTorch's keyword names) and
              the parameters after each of STEPS steps, each from a fresh copy of the model.
  schedulers  per case: the scheduler, its options, the metric fed to each step (plateau
              only) and the learning rate before the first step and after each step.
  clip        the gradients at the initial parameters, and after clip_grad_norm_ /
              clip_grad_value_, with the norm clip_grad_norm_ returned.
"""

import json
import math
import os

import torch

SEED = 20240612
STEPS = 5
BASE_LR = 0.1
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim.json")

OPTIMIZERS = [
    ("sgd", "SGD", {"lr": 0.1}),
    ("sgd_momentum_dampening", "SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.1}),
    ("sgd_nesterov", "SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
    ("sgd_weight_decay", "SGD", {"lr": 0.1, "momentum": 0.5, "weight_decay": 0.05}),
    ("sgd_plain_weight_decay", "SGD", {"lr": 0.1, "weight_decay": 0.05}),
    ("adam", "Adam", {"lr": 0.01}),
    ("adam_betas_eps", "Adam", {"lr": 0.02, "betas": [0.8, 0.9], "eps": 1e-3}),
    ("adam_weight_decay", "Adam", {"lr": 0.01, "weight_decay": 0.1}),
    ("adam_amsgrad", "Adam", {"lr": 0.01, "betas": [0.9, 0.5], "amsgrad": True}),
    ("adamw", "AdamW", {"lr": 0.01, "weight_decay": 0.1}),
    ("adamw_default_decay", "AdamW", {"lr": 0.01}),
    ("adamw_amsgrad", "AdamW", {"lr": 0.01, "betas": [0.9, 0.5], "weight_decay": 0.1, "amsgrad": True}),
    ("rmsprop", "RMSprop", {"lr": 0.01}),
    ("rmsprop_momentum", "RMSprop", {"lr": 0.01, "momentum": 0.5, "alpha": 0.9}),
    ("rmsprop_centered", "RMSprop", {"lr": 0.01, "centered": True}),
    ("rmsprop_centered_momentum", "RMSprop",
     {"lr": 0.01, "momentum": 0.9, "centered": True, "weight_decay": 0.01, "eps": 1e-4}),
    ("adagrad", "Adagrad", {"lr": 0.1}),
    ("adagrad_decay", "Adagrad",
     {"lr": 0.1, "lr_decay": 0.05, "initial_accumulator_value": 0.1, "weight_decay": 0.01, "eps": 1e-6}),
]

# Metric sequences for ReduceLROnPlateau: improving, then flat, with a late improvement.
LOSSES = [1.0, 0.8, 0.7, 0.69, 0.695, 0.7, 0.7, 0.6, 0.61, 0.6, 0.6, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.5]
ACCURACIES = [0.5, 0.6, 0.6, 0.6, 0.6, 0.65, 0.7, 0.7, 0.7, 0.7, 0.9, 0.9, 0.9, 0.9, 0.9]


def initial_model():
    gen = torch.Generator().manual_seed(SEED)
    rand = lambda *shape: torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1
    return {
        "w1": rand(4, 3) * 0.8,
        "b1": rand(4) * 0.3,
        "w2": rand(2, 4) * 0.8,
        "b2": rand(2) * 0.3,
        "x": rand(6, 3),
        "y": rand(6, 2),
    }


def loss_of(params, model):
    w1, b1, w2, b2 = params
    hidden = torch.tanh(model["x"] @ w1.T + b1)
    return ((hidden @ w2.T + b2 - model["y"]) ** 2).mean()


def fresh_params(model):
    return [model[k].clone().requires_grad_(True) for k in ("w1", "b1", "w2", "b2")]


def flat(params):
    return [p.detach().reshape(-1).tolist() for p in params]


def run_optimizer(model, name, options):
    params = fresh_params(model)
    kwargs = dict(options)
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    opt = getattr(torch.optim, name)(params, foreach=False, **kwargs)
    history = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss_of(params, model).backward()
        opt.step()
        history.append(flat(params))
    return history


def lr_sequence(make, metrics=None, epochs=12):
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=BASE_LR)
    sched = make(opt)
    lrs = [opt.param_groups[0]["lr"]]
    for epoch in range(len(metrics) if metrics else epochs):
        opt.step()
        if metrics:
            sched.step(metrics[epoch])
        else:
            sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    return lrs


def schedulers():
    S = torch.optim.lr_scheduler
    plateau_min = {"mode": "min", "factor": 0.5, "patience": 2, "threshold": 0.01, "cooldown": 1, "min_lr": 0.02}
    plateau_max = {"mode": "max", "factor": 0.1, "patience": 1, "threshold": 0.0, "cooldown": 0, "min_lr": 0.0}
    cases = [
        ("step", {"step_size": 3, "gamma": 0.5}, lambda o: S.StepLR(o, 3, 0.5), None),
        ("exponential", {"gamma": 0.9}, lambda o: S.ExponentialLR(o, 0.9), None),
        ("cosine", {"t_max": 5, "eta_min": 0.001}, lambda o: S.CosineAnnealingLR(o, 5, 0.001), None),
        ("warmup_constant", {"warmup_steps": 4, "start_factor": 0.25},
         lambda o: S.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=4), None),
        ("warmup_cosine", {"warmup_steps": 4, "start_factor": 0.25, "t_max": 6, "eta_min": 0.0},
         lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.25, total_iters=4),
                                      S.CosineAnnealingLR(o, 6, 0.0)], milestones=[4]), None),
        ("warmup_step", {"warmup_steps": 3, "start_factor": 0.1, "step_size": 2, "gamma": 0.5},
         lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, total_iters=3),
                                      S.StepLR(o, 2, 0.5)], milestones=[3]), None),
        ("plateau_min", plateau_min, lambda o: S.ReduceLROnPlateau(o, **plateau_min), LOSSES),
        ("plateau_max", plateau_max, lambda o: S.ReduceLROnPlateau(o, **plateau_max), ACCURACIES),
    ]
    return [{"name": n, "options": opts, "metrics": m, "lrs": lr_sequence(make, m)} for n, opts, make, m in cases]


def clipping(model):
    params = fresh_params(model)
    loss_of(params, model).backward()
    grads = [p.grad.clone() for p in params]
    out = {"grads": [g.reshape(-1).tolist() for g in grads], "norm_cases": [], "value_cases": []}
    for max_norm in (0.05, 100.0):
        for p, g in zip(params, grads):
            p.grad = g.clone()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        out["norm_cases"].append({"max_norm": max_norm, "norm": norm.item(), "grads": flat([p.grad for p in params])})
    for clip in (0.02,):
        for p, g in zip(params, grads):
            p.grad = g.clone()
        torch.nn.utils.clip_grad_value_(params, clip)
        out["value_cases"].append({"clip": clip, "grads": flat([p.grad for p in params])})
    return out


def main():
    model = initial_model()
    optimizers = [
        {"name": case, "optimizer": name, "options": opts, "steps": run_optimizer(model, name, opts)}
        for case, name, opts in OPTIMIZERS
    ]
    # AMSGrad must matter here, or the cases would not test it.
    by_name = {o["name"]: o["steps"] for o in optimizers}
    plain = run_optimizer(model, "Adam", {"lr": 0.01, "betas": [0.9, 0.5]})
    assert plain[-1] != by_name["adam_amsgrad"][-1], "AMSGrad made no difference"
    data = {
        "generator": "crates/rnn-nn/tests/golden/make_optim_golden.py",
        "torch_version": torch.__version__,
        "steps": STEPS,
        "base_lr": BASE_LR,
        "model": {k: {"shape": list(v.shape), "data": v.reshape(-1).tolist()} for k, v in model.items()},
        "optimizers": optimizers,
        "schedulers": schedulers(),
        "clip": clipping(model),
    }
    assert all(math.isfinite(x) for o in optimizers for s in o["steps"] for p in s for x in p)
    with open(OUT, "w") as f:
        json.dump(data, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
