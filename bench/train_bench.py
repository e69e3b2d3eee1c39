#!/usr/bin/env python3
"""PyTorch twin of `rnn bench train`: the same models (the MLP 784-512-256-10 and the small
CNN of `rnn train --model cnn` on random MNIST-shaped data; a ResNet-8 on random
CIFAR-shaped data, as in crates/rnn-cli/src/bench_resnet.rs), batch 128, Adam(1e-3),
shuffled each epoch, and the loss (and, for the Network models, accuracy) accumulated each
batch as the rnn loops do. Reports the fastest of N epochs, in the JSON format of
`rnn bench train --json`."""
import argparse
import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 128
FULL = {"mlp": 60_000, "cnn": 10_000, "resnet": 2_560, "epochs": 3}
QUICK = {"mlp": 2_048, "cnn": 512, "resnet": 256, "epochs": 2}


def mlp():
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def conv_bn(cin, cout, kernel, stride):
    """A convolution without bias (it feeds a BatchNorm) and its BatchNorm."""
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.first = conv_bn(cin, cout, 3, stride)
        self.second = conv_bn(cout, cout, 3, 1)
        self.projection = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        h = self.second(F.relu(self.first(x)))
        return F.relu(h + (self.projection(x) if self.projection is not None else x))


class ResNet8(nn.Module):
    """conv-BN-ReLU stem (16), one basic block per stage (16, 32, 64; stride 2 between
    stages, 1x1 projection shortcuts), global average pooling, linear 10."""

    def __init__(self):
        super().__init__()
        self.stem = conv_bn(3, 16, 3, 1)
        self.blocks = nn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 64, 2))
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        h = self.blocks(F.relu(self.stem(x)))
        return self.head(h.mean((2, 3)))


def resnet_epoch(model, opt, x, y):
    """One pass in shuffled batches, the summed loss read at the end; returns seconds."""
    start = time.perf_counter()
    perm = torch.randperm(x.shape[0])
    loss_sum = torch.zeros(())
    for i in range(0, x.shape[0], BATCH):
        idx = perm[i:i + BATCH]
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            loss_sum += loss.detach() * idx.shape[0]
    float(loss_sum)
    return time.perf_counter() - start


def bench_resnet(n, epochs, threads):
    torch.manual_seed(7)
    x = torch.rand(n, 3, 32, 32)
    y = torch.randint(0, 10, (n,))
    model = ResNet8()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    best = min(resnet_epoch(model, opt, x, y) for _ in range(epochs))
    name = f"train_resnet8_cifar_n{n}"
    print(f"{name:<28} {n:>10} {best * 1e3:>12.1f} {n / best:>12.0f}")
    return {"suite": "train", "name": name, "metric": "ms", "value": best * 1e3,
            "higher_is_better": False, "threads": threads}


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
    p.add_argument("--resnet-only", action="store_true", help="only the ResNet-8 workload")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    sizes = QUICK if args.quick else FULL
    print(f"torch {torch.__version__}, {args.threads} threads, batch {BATCH}, Adam, "
          f"best of {sizes['epochs']} epochs")
    print(f"{'workload':<28} {'samples':>10} {'epoch ms':>12} {'samples/s':>12}")
    kinds = () if args.resnet_only else ("mlp", "cnn")
    records = [bench(k, sizes[k], sizes["epochs"], args.threads) for k in kinds]
    records.append(bench_resnet(sizes["resnet"], sizes["epochs"], args.threads))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=2)


if __name__ == "__main__":
    main()
