#!/usr/bin/env python3
"""PyTorch DDP twin of `rnn train --distributed` on the CPU (gloo backend): the MLP
784-512-256-10, batch 128 per rank, Adam(1e-3), a DistributedSampler reshuffled each epoch,
loss and hits summed over each epoch. Data are random MNIST-shaped rows (throughput does not
depend on the values). Prints one line `samples_per_sec <best epoch over all ranks' samples>`.

    python3 bench/ddp_bench.py --ranks 2 --threads 1 --samples 9000 --epochs 3
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

BATCH = 128


def mlp():
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))


def epoch(model, opt, x, y, sampler, ep):
    """One pass over this rank's shard; returns seconds (all ranks, after a barrier)."""
    sampler.set_epoch(ep)
    ids = torch.tensor(list(iter(sampler)))
    dist.barrier()
    start = time.perf_counter()
    loss_sum, hits = torch.zeros(()), torch.zeros(())
    for i in range(0, ids.shape[0], BATCH):
        idx = ids[i:i + BATCH]
        xb, yb = x[idx], y[idx]
        out = model(xb)
        loss = F.cross_entropy(out, yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces gradient buckets during backward
        opt.step()
        with torch.no_grad():
            loss_sum += loss.detach() * xb.shape[0]
            hits += (out.argmax(-1) == yb).sum()
    totals = torch.stack([loss_sum, hits])
    dist.all_reduce(totals)  # the epoch's metrics over all ranks, as rnn reports them
    return time.perf_counter() - start


def worker(rank, args):
    torch.set_num_threads(args.threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.manual_seed(7)
    x = torch.rand(args.samples, 784)
    y = torch.randint(0, 10, (args.samples,))
    model = DDP(mlp())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sampler = DistributedSampler(range(args.samples), num_replicas=args.ranks, rank=rank, shuffle=True, seed=42)
    best = min(epoch(model, opt, x, y, sampler, ep) for ep in range(args.epochs))
    if rank == 0:
        print(f"samples_per_sec {args.samples / best:.1f}", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--samples", type=int, default=9000)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--port", type=int, default=29517)
    args = p.parse_args()
    mp.spawn(worker, args=(args,), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
