#!/usr/bin/env python3
"""Where the PyTorch twin's GPT training step spends its time: runs bench/gpt_twin.py's model
and training step (same init, batches, optimizer and clipping) under torch.profiler and
prints the ops by self CPU time, and the time of forward, backward, clipping and the
optimizer step. Usage:
  python bench/gpt_twin_profile.py --init <dir>/init.safetensors --data <text> [--steps 30]"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_twin  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--init", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--rows", type=int, default=30, help="ops listed")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    tensors, metadata = gpt_twin.read_safetensors(args.init)
    config = json.loads(metadata["rnn.gpt.config"])
    text = gpt_twin.load_text(args.data)
    index = {c: i for i, c in enumerate(metadata["rnn.vocab"])}
    ids = torch.tensor([index[c] for c in text], dtype=torch.long)
    train = ids[: int(len(ids) * 0.9)]
    context = config["context_length"]
    model = gpt_twin.Gpt(config)
    model.load_state_dict(tensors)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    sampler = gpt_twin.SplitMix64(args.seed)
    phases = {"forward": 0.0, "backward": 0.0, "clip": 0.0, "optimizer": 0.0}

    def step(timed):
        starts = [sampler.next() % (len(train) - context) for _ in range(args.batch_size)]
        x, y = gpt_twin.windows(train, starts, context)
        marks = [time.perf_counter()]
        with torch.profiler.record_function("phase: forward"):
            loss = model.loss(x, y)
        marks.append(time.perf_counter())
        opt.zero_grad(set_to_none=True)
        with torch.profiler.record_function("phase: backward"):
            loss.backward()
        marks.append(time.perf_counter())
        with torch.profiler.record_function("phase: clip"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        marks.append(time.perf_counter())
        with torch.profiler.record_function("phase: optimizer"):
            opt.step()
        marks.append(time.perf_counter())
        if timed:
            for name, a, b in zip(phases, marks, marks[1:]):
                phases[name] += b - a

    for _ in range(args.warmup):
        step(False)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step(True)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))
    total = sum(phases.values())
    print(f"per step (under the profiler): {total / args.steps * 1e3:.1f} ms")
    for name, s in phases.items():
        print(f"  {name:<10} {s / args.steps * 1e3:7.1f} ms  {s / total * 100:5.1f}%")


if __name__ == "__main__":
    main()
