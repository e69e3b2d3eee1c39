"""Per-op profile of the PyTorch twin's ResNet-8 training step (bench/train_bench.py):
torch.profiler over STEPS batches of 128 after a warm-up, self CPU time per op.

    python bench/profile_resnet.py [--threads 2] [--steps 10]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from train_bench import BATCH, ResNet8


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rows", type=int, default=25)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(7)
    model = ResNet8()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.rand(BATCH, 3, 32, 32), torch.randint(0, 10, (BATCH,))

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
