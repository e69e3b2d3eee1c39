#!/usr/bin/env python3
"""A model (not a measurement) of data-parallel step time with bucketed gradient all_reduce
overlapping the backward pass, as rnn-train does it: gradients become ready layer by layer
during backward; a bucket's all_reduce starts when its last gradient is ready and after the
previous bucket's all_reduce (one communication stream, buckets in order); the step ends when
both backward and the last all_reduce are done.

All-reduce time of S bytes over n ranks, ring algorithm (NCCL's for large buffers):
    t = 2 (n - 1) / n * S / bus_bandwidth + 2 (n - 1) * latency
Two-level (several nodes): NCCL rings cross each node's NVLink and the inter-node NICs; with
one NIC per GPU (rail-optimized clusters) the ring's slowest link is one NIC, so the
inter-node figure is the bus bandwidth.

Run with no arguments for the tables of docs/distributed.md; `--check-cpu` applies the same
model to the 2-rank CPU measurement of bench/results/*-ddp-*.md.
"""
import argparse

# Published link specifications (not measured here) and what NCCL typically reaches of them.
NVLINK4_GBPS = 450.0       # H100 SXM: 900 GB/s NVLink total, 450 GB/s each direction
IB_NDR_GBPS = 50.0         # InfiniBand NDR: 400 Gb/s per port, one port per GPU
ROCE_200_GBPS = 25.0       # 200 Gb/s RoCE per GPU
LINK_EFFICIENCY = 0.8      # bus bandwidth / link rate in nccl-tests reports (assumption)
LATENCY_S = 5e-6           # per ring step (assumption: NCCL's few microseconds per hop)

# rnn-train's buckets are host memory today: each bucket crosses PCIe twice (down and up).
PCIE5_GBPS = 64.0          # PCIe 5.0 x16, each direction (published)

# Compute: an H100's dense BF16 peak (published) at an assumed 40% model FLOPs utilization.
H100_BF16_FLOPS = 989e12
MFU = 0.40


def allreduce_seconds(nbytes, ranks, bus_gbps, staging_gbps=None, latency=LATENCY_S):
    if ranks == 1:
        return 0.0
    t = 2 * (ranks - 1) / ranks * nbytes / (bus_gbps * 1e9) + 2 * (ranks - 1) * latency
    if staging_gbps:
        t += 2 * nbytes / (staging_gbps * 1e9)  # device to host, then host to device
    return t


def step_seconds(forward, backward, grad_bytes, bucket_bytes, ranks, bus_gbps, overlap=True, staging_gbps=None):
    """Step time with buckets of `bucket_bytes` (gradients ready uniformly over backward)."""
    buckets = max(1, -(-grad_bytes // bucket_bytes))
    comm_end = 0.0
    total_comm = 0.0
    for k in range(buckets):
        size = min(bucket_bytes, grad_bytes - k * bucket_bytes)
        ready = forward + backward * (k + 1) / buckets if overlap else forward + backward
        t = allreduce_seconds(size, ranks, bus_gbps, staging_gbps)
        total_comm += t
        comm_end = max(ready, comm_end) + t
    return max(forward + backward, comm_end), total_comm


def gpu_table(params, tokens_per_gpu, bucket_mb, grad_bytes_per_param):
    flops = 6 * params * tokens_per_gpu  # forward + backward of a dense transformer
    compute = flops / (H100_BF16_FLOPS * MFU)
    forward, backward = compute / 3, compute * 2 / 3
    grad_bytes = params * grad_bytes_per_param
    print(f"model: {params / 1e6:.0f}M parameters, {grad_bytes / 2**20:.0f} MiB of gradients, "
          f"{tokens_per_gpu} tokens per GPU per step, buckets of {bucket_mb} MiB")
    print(f"compute per step: {compute * 1e3:.1f} ms ({flops / 1e12:.1f} TFLOP at "
          f"{MFU:.0%} of {H100_BF16_FLOPS / 1e12:.0f} TFLOP/s)")
    print()
    print("| GPUs | links (bus GB/s) | all_reduce total ms | step ms, no overlap | step ms, bucketed overlap "
          "| scaling efficiency (overlap) |")
    print("|---|---|---|---|---|---|")
    staged = PCIE5_GBPS * LINK_EFFICIENCY
    cases = [
        (8, "NVLink 4, one node", NVLINK4_GBPS * LINK_EFFICIENCY, None),
        (8, "NVLink 4, buckets staged in host memory", NVLINK4_GBPS * LINK_EFFICIENCY, staged),
        (64, "8 nodes, IB NDR 400G per GPU", IB_NDR_GBPS * LINK_EFFICIENCY, None),
        (64, "8 nodes, IB NDR, staged in host memory", IB_NDR_GBPS * LINK_EFFICIENCY, staged),
        (64, "8 nodes, RoCE 200G per GPU", ROCE_200_GBPS * LINK_EFFICIENCY, None),
    ]
    for ranks, name, bus, staging in cases:
        b = bucket_mb << 20
        serial, comm = step_seconds(forward, backward, grad_bytes, b, ranks, bus, overlap=False, staging_gbps=staging)
        overlapped, _ = step_seconds(forward, backward, grad_bytes, b, ranks, bus, staging_gbps=staging)
        print(f"| {ranks} | {name} ({bus:.0f}) | {comm * 1e3:.1f} | {serial * 1e3:.1f} | "
              f"{overlapped * 1e3:.1f} | {compute / overlapped:.0%} |")


def cpu_check(step_1x1, ceiling, grad_bytes, allreduce_gbps, bucket_mb):
    """The model on this machine: 2 CPU ranks whose compute runs `ceiling` times as fast
    together as one alone (both measured by bench/run_ddp.sh), and a measured all_reduce rate."""
    compute = 2 * step_1x1 / ceiling  # two ranks share the machine's measured throughput
    forward, backward = compute / 3, compute * 2 / 3
    overlapped, comm = step_seconds(forward, backward, grad_bytes, bucket_mb << 20, 2, allreduce_gbps)
    print(f"2 CPU ranks: compute {compute * 1e3:.2f} ms, all_reduce {comm * 1e3:.2f} ms, "
          f"step {overlapped * 1e3:.2f} ms: {2 * step_1x1 / overlapped:.2f}x the 1 x 1 throughput")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--params", type=float, default=100e6)
    p.add_argument("--tokens-per-gpu", type=int, nargs="+", default=[8 * 1024, 32 * 1024],
                   help="tokens per GPU per step (default: 8 and 32 sequences of 1024)")
    p.add_argument("--bucket-mb", type=int, default=25)
    p.add_argument("--grad-bytes", type=int, default=4, help="bytes per gradient value (f32: 4)")
    p.add_argument("--check-cpu", action="store_true")
    p.add_argument("--step-1x1-ms", type=float, default=7.06, help="measured: 128 / (rnn 1x1 samples/s)")
    p.add_argument("--ceiling", type=float, default=1.22, help="measured: two 1x1 runs at once / one")
    p.add_argument("--cpu-allreduce-gbps", type=float, default=2.0, help="measured bus GB/s on this machine")
    args = p.parse_args()
    if args.check_cpu:
        cpu_check(args.step_1x1_ms / 1e3, args.ceiling, 535_818 * 4, args.cpu_allreduce_gbps, args.bucket_mb)
    else:
        for tokens in args.tokens_per_gpu:
            gpu_table(int(args.params), tokens, args.bucket_mb, args.grad_bytes)
            print()


if __name__ == "__main__":
    main()
