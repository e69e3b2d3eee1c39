#!/usr/bin/env python3
"""PyTorch twin of `rnn bench train`: the same two models (the MLP 784-512-256-10 and the
small CNN of `rnn train --model cnn`), random MNIST-shaped data, batch 128, Adam(1e-3),
shuffled each epoch, and the loss and accuracy accumulated each batch as the rnn loop does.
Reports the fastest of N epochs, in the JSON format of `rnn bench train --json`."""
import argparse
import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 128
FULL = {"mlp": 60_000, "cnn": 10_000, "epochs": 3}
QUICK = {"mlp": 2_048, "cnn": 512, "epochs": 2}


def mlp():
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def epoch(model, opt, x, y):
    """One pass in shuffled batches; returns seconds. Reads the summed loss and hits at the
    end of the epoch, as rnn does (no per-batch host sync)."""
    start = time.perf_counter()
    perm = torch.randperm(x.shape[0])
    loss_sum = torch.zeros(())
    hits = torch.zeros(())
    for i in range(0, x.shape[0], BATCH):
        idx = perm[i:i + BATCH]
        xb, yb = x[idx], y[idx]
        out = model(xb)
        loss = F.cross_entropy(out, yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            loss_sum += loss.detach() * xb.shape[0]
            hits += (out.argmax(-1) == yb).sum()
    float(loss_sum), float(hits)
    return time.perf_counter() - start


def bench(kind, n, epochs, threads):
    torch.manual_seed(7)
    x = torch.rand(n, 784)
    y = torch.randint(0, 10, (n,))
    if kind == "cnn":
        x = x.reshape(n, 1, 28, 28)
    model = mlp() if kind == "mlp" else cnn()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    best = min(epoch(model, opt, x, y) for _ in range(epochs))
    name = f"train_mlp_784_512_256_10_n{n}" if kind == "mlp" else f"train_cnn_16_32_n{n}"
    print(f"{name:<28} {n:>10} {best * 1e3:>12.1f} {n / best:>12.0f}")
    return {"suite": "train", "name": name, "metric": "ms", "value": best * 1e3,
            "higher_is_better": False, "threads": threads}


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--json", metavar="FILE", help="write records as a JSON list")
    p.add_argument("--quick", action="store_true", help="small sizes for a smoke test")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    sizes = QUICK if args.quick else FULL
    print(f"torch {torch.__version__}, {args.threads} threads, batch {BATCH}, Adam, "
          f"best of {sizes['epochs']} epochs")
    print(f"{'workload':<28} {'samples':>10} {'epoch ms':>12} {'samples/s':>12}")
    records = [bench(k, sizes[k], sizes["epochs"], args.threads) for k in ("mlp", "cnn")]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=2)


if __name__ == "__main__":
    main()
