#!/usr/bin/env python3
"""Compare `rnn bench <suite> --json` output with the PyTorch twin's `--json` output
(bench/cpu_bench.py for `cpu`, bench/train_bench.py for `train`).

ratio = ours / torch on the metric value as-is: for GFLOP/s and GB/s, ratio > 1
means rnn is faster; for ms, ratio < 1 means rnn is faster.
"""
import argparse
import json
import sys

# (name prefix, comparison, threshold) from the issue texts; the first matching prefix counts.
GOALS = [
    # Mixed precision: the bf16 MLP step against torch's autocast bf16 step.
    ("mlp_784_512_256_10_b128_bf16", "<=", 1.0),
    ("matmul_", ">=", 1.0),
    ("unary_", ">=", 1.0),
    ("binary_", ">=", 1.0),
    ("softmax_16M", ">=", 1.0),
    ("sum_16M", ">=", 1.0),
    ("mlp_", "<=", 0.7),
    # CPU training: the CNN and ResNet-8 epochs at PyTorch's time or better.
    ("train_", "<=", 1.0),
    ("attn_", ">=", 1.0),
    # Fused attention on an NVIDIA GPU in bf16 against torch's flash backend (TFLOP/s).
    ("attention_fwd_", ">=", 0.8),
    ("attention_bwd_", ">=", 0.7),
    ("attnmem_", "<=", 1.0),
    ("attnrss_", "<=", 1.0),
]
COLUMNS = ["name", "metric", "ours", "torch", "ratio", "goal", "met?"]
HEADER = ("ratio = ours / torch on the metric as-is: for GFLOP/s and GB/s > 1 means "
          "rnn is faster; for ms < 1 means rnn is faster.")


def load(path):
    """Load a list of benchmark records keyed by name; exit with a clear message on error."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        sys.exit(f"error: cannot read {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        sys.exit(f"error: {path} is not valid JSON: {e}")
    if not isinstance(data, list) or not all(
            isinstance(r, dict) and {"name", "metric", "value"} <= r.keys()
            and isinstance(r["value"], (int, float)) for r in data):
        sys.exit(f"error: {path} must be a JSON list of records with name, metric, "
                 "numeric value")
    return {r["name"]: r for r in data}


def load_best(paths):
    """Records from one or more runs (comma-separated paths), keeping each workload's best
    value: the highest throughput or the lowest time. Noise on a shared machine only ever
    slows a run down, so the best of a few runs is the most repeatable figure."""
    best = {}
    for path in paths.split(","):
        for name, rec in load(path).items():
            lower = rec.get("higher_is_better") is False or rec["metric"] in ("ms", "MB")
            old = best.get(name)
            if old is None or (rec["value"] < old["value"] if lower else rec["value"] > old["value"]):
                best[name] = rec
    return best


def goal_for(name):
    for prefix, op, threshold in GOALS:
        if name.startswith(prefix):
            return op, threshold
    return None


def row(name, ours, torch):
    """One table row (list of strings) for a benchmark present on both sides."""
    if ours["metric"] != torch["metric"]:
        metric = f"{ours['metric']} vs {torch['metric']} (mismatch)"
        ratio = None
    else:
        metric = ours["metric"]
        ratio = ours["value"] / torch["value"] if torch["value"] else None
    goal = goal_for(name)
    goal_s = f"{goal[0]} {goal[1]:g}" if goal else "-"
    if goal is None or ratio is None:
        met = "-"
    else:
        met = "yes" if (ratio >= goal[1] if goal[0] == ">=" else ratio <= goal[1]) else "NO"
    ratio_s = f"{ratio:.3f}" if ratio is not None else "n/a"
    return [name, metric, f"{ours['value']:.3f}", f"{torch['value']:.3f}", ratio_s, goal_s, met]


def render_plain(rows):
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([fmt(COLUMNS), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows])


def render_markdown(rows):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ours", help="JSON from `rnn bench cpu --json` (several: comma-separated, best kept)")
    p.add_argument("torch", help="JSON from `bench/cpu_bench.py --json` (several: comma-separated)")
    p.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = p.parse_args()
    ours, torch = load_best(args.ours), load_best(args.torch)
    common = [n for n in ours if n in torch]
    rows = [row(n, ours[n], torch[n]) for n in common]
    print(HEADER + "\n")
    print(render_markdown(rows) if args.markdown else render_plain(rows))
    only_ours = [n for n in ours if n not in torch]
    only_torch = [n for n in torch if n not in ours]
    if only_ours:
        print(f"\nOnly in ours: {', '.join(only_ours)}")
    if only_torch:
        print(f"\nOnly in torch: {', '.join(only_torch)}")


if __name__ == "__main__":
    main()
