#!/usr/bin/env python3
"""The cost of calling rnn from Python, side by side with PyTorch and with rnn called from Rust.

Workloads (CPU, f32; the same shapes in python/examples/rust_timing.rs):
- add16_x1000: 1000 adds of two 16-element tensors (per-op overhead; goal <= 1.0x torch);
- mlp_step: one training step of an MLP 64-128-10 at batch 32 (zero_grad, forward, cross
  entropy, backward, Adam step; goal <= 1.0x torch);
- matmul_1024: a 1024x1024 matmul (a large op; goal: within 5% of the same op from Rust).

Every time is the median by bench/timing.py's rule; the three sides run alternately for
``--rounds`` rounds and each workload's best round counts (a shared machine's load comes and
goes). Run from the repository root with the
`rnn` package and torch installed (torch is optional: its column is left empty without it):

    cargo build --release -p rnn-python --example rust_timing
    python bench/python_overhead.py --rust target/release/examples/rust_timing
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from timing import time_call  # noqa: E402

import rnn  # noqa: E402

ADDS = 1000
BATCH, INPUTS, HIDDEN, CLASSES = 32, 64, 128, 10
MATMUL = 1024


def adds(a, b):
    def run():
        for _ in range(ADDS):
            a + b
    return run


def rnn_workloads():
    rng = np.random.default_rng(0)
    a, b = (rnn.Tensor(rng.standard_normal(16).astype(np.float32)) for _ in range(2))
    model = rnn.nn.Sequential(rnn.nn.Linear(INPUTS, HIDDEN), rnn.nn.ReLU(), rnn.nn.Linear(HIDDEN, CLASSES))
    opt = rnn.optim.Adam(model.parameters(), lr=1e-3)
    x = rnn.Tensor(rng.standard_normal((BATCH, INPUTS)).astype(np.float32))
    y = rnn.Tensor(np.arange(BATCH, dtype=np.int64) % CLASSES)

    def step():
        opt.zero_grad()
        loss = rnn.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    m1, m2 = (rnn.Tensor(rng.standard_normal((MATMUL, MATMUL)).astype(np.float32)) for _ in range(2))
    return {"add16_x1000": adds(a, b), "mlp_step": step, "matmul_1024": lambda: m1 @ m2}


def torch_workloads(torch):
    a, b = torch.randn(16), torch.randn(16)
    model = torch.nn.Sequential(torch.nn.Linear(INPUTS, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(BATCH, INPUTS), torch.arange(BATCH) % CLASSES

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    m1, m2 = torch.randn(MATMUL, MATMUL), torch.randn(MATMUL, MATMUL)
    return {"add16_x1000": adds(a, b), "mlp_step": step, "matmul_1024": lambda: m1 @ m2}


def best(rounds):
    """Each workload's best (smallest) median over the rounds, as bench/compare.py counts rounds."""
    return {k: min(r[k] for r in rounds) for k in rounds[0]} if rounds else {}


def side_times(side):
    """One round of one side's workloads, in this process: {workload: seconds}."""
    if side == "python":
        return {k: time_call(f) for k, f in rnn_workloads().items()}
    import torch
    return {k: time_call(f) for k, f in torch_workloads(torch).items()}


def run_side(command):
    """A round in a fresh process (each library's thread pool alone in its process: torch's
    OpenMP threads and rnn's rayon threads would otherwise wait on each other's cores)."""
    return json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rust", help="the rust_timing example binary (the Rust column)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the three sides")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--side", choices=["python", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(side_times(args.side)))
        return
    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    commands = {"python": [sys.executable, __file__, "--side", "python"]}
    if torch_version:
        commands["torch"] = [sys.executable, __file__, "--side", "torch"]
    if args.rust:
        commands["rust"] = [args.rust]
    rounds = {side: [] for side in commands}
    for _ in range(args.rounds):
        for side, command in commands.items():
            rounds[side].append(run_side(command))
    results = {side: best(r) for side, r in rounds.items()}
    results.update(rounds=rounds, torch_version=torch_version)
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


def print_table(results):
    ours, torch, rust = results["python"], results.get("torch", {}), results.get("rust", {})
    goals = {"add16_x1000": ("torch", 1.0), "mlp_step": ("torch", 1.0), "matmul_1024": ("rust", 1.05)}
    print("| workload | rnn from Python (ms) | torch (ms) | rnn from Rust (ms) | ratio | goal | met |")
    print("|---|---|---|---|---|---|---|")
    for name, t in ours.items():
        ref_name, goal = goals[name]
        ref = (torch if ref_name == "torch" else rust).get(name)
        ratio = t / ref if ref else None
        cells = [f"{v * 1e3:.3f}" if v else "" for v in (t, torch.get(name), rust.get(name))]
        met = "" if ratio is None else ("yes" if ratio <= goal else "no")
        print(f"| {name} | {' | '.join(cells)} | {'' if ratio is None else f'{ratio:.2f} vs {ref_name}'} "
              f"| <= {goal} | {met} |")


if __name__ == "__main__":
    main()
