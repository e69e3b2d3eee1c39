#!/usr/bin/env python3
"""rnn's wgpu matmul against burn's (CubeCL) on the same adapter, measured alternately.

Each round runs `rnn bench gpu --device wgpu:N --matmul-only` and then `burn_matmul`
(each a fresh process: both compile their kernels and burn autotunes in the warm-up calls),
and parses their `matmul_f32_<n> <GFLOP/s>` rows. Prints every round, then per size the
median over rounds of each side and their ratio (rnn / burn, > 1 means rnn is faster).

    python3 bench/burn_matmul/side_by_side.py --rnn target/release/rnn \\
        --burn bench/burn_matmul/target/release/burn_matmul [--rounds 3] [--markdown]

`--rnn` may be given several times as LABEL=PATH (e.g. before=/tmp/rnn-old after=...): each
round then runs every rnn binary in turn before burn, and each gets its own ratio.

The adapter is each program's default wgpu adapter (`--device` for rnn): run where that is
the same one, e.g. with only lavapipe installed and WGPU_BACKEND=vulkan.
"""

import argparse
import re
import statistics
import subprocess
import sys

ROW = re.compile(r"^matmul_f32_(\d+)\s+([0-9.]+)\s+GFLOP/s")


def run(cmd):
    """GFLOP/s by size from the rows `cmd` prints."""
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = {int(m.group(1)): float(m.group(2)) for m in map(ROW.match, out.splitlines()) if m}
    if not rows:
        sys.exit(f"no matmul_f32 rows from {' '.join(cmd)}:\n{out}")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rnn", required=True, action="append", help="the rnn binary (rnn-cli, release build), or LABEL=PATH")
    ap.add_argument("--burn", required=True, help="the burn_matmul binary (release build)")
    ap.add_argument("--device", default="wgpu:0", help="rnn's device (default wgpu:0)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--markdown", action="store_true", help="print the summary as a markdown table")
    args = ap.parse_args()

    binaries = [b.split("=", 1) if "=" in b else ["rnn", b] for b in args.rnn]
    ours = {label: [] for label, _ in binaries}
    burn = []
    for r in range(args.rounds):
        for label, path in binaries:
            ours[label].append(run([path, "bench", "gpu", "--device", args.device, "--matmul-only"]))
        burn.append(run([args.burn]))
        for n in sorted(burn[-1]):
            sides = "  ".join(f"{label} {rounds[-1].get(n, float('nan')):8.2f}" for label, rounds in ours.items())
            print(f"round {r + 1}: n={n:<5} {sides}  burn {burn[-1][n]:8.2f} GFLOP/s", flush=True)

    print()
    if args.markdown:
        print("| size | rnn | rnn GFLOP/s (median) | burn GFLOP/s (median) | ratio rnn / burn | rnn rounds | burn rounds |")
        print("|---|---|---|---|---|---|---|")
    else:
        print(f"{'size':<8} {'rnn':<10} {'GFLOP/s':>10} {'burn':>10} {'ratio':>8}   (median of {args.rounds} rounds)")
    each = lambda rounds, n: ", ".join(f"{x[n]:.2f}" for x in rounds)
    for n in sorted(burn[0]):
        b = statistics.median(x[n] for x in burn)
        for label, rounds in ours.items():
            if not all(n in x for x in rounds):
                continue
            o = statistics.median(x[n] for x in rounds)
            if args.markdown:
                print(f"| {n} | {label} | {o:.2f} | {b:.2f} | {o / b:.2f}x | {each(rounds, n)} | {each(burn, n)} |")
            else:
                print(f"{n:<8} {label:<10} {o:>10.2f} {b:>10.2f} {o / b:>7.2f}x")


if __name__ == "__main__":
    main()
