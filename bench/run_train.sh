#!/usr/bin/env bash
# Build rnn, run the training benchmark for rnn and PyTorch, write
# bench/results/<date>-train-<machine>.md. The sides run alternately ROUNDS times (default 2);
# each workload's best run counts. Set QUICK=1 for a smoke run (small sizes), PYTHON to the
# interpreter that has torch (default python3), RNN_BIN a prebuilt rnn binary (skips the build),
# RESNET_ONLY=1 to run only the ResNet-8 workload on both sides.
set -euo pipefail
cd "$(dirname "$0")/.."

threads=$(nproc)
day=$(date +%F)
tmp=$(mktemp -d /tmp/rnn-bench-train.XXXXXX)
rounds=${ROUNDS:-2}
quick=${QUICK:+--quick}
only=${RESNET_ONLY:+--resnet-only}

rnn=${RNN_BIN:-${CARGO_TARGET_DIR:-target}/release/rnn}
[ -n "${RNN_BIN:-}" ] || cargo build --release -p rnn-cli
python=${PYTHON:-python3}
ours="" theirs=""
for round in $(seq 1 "$rounds"); do
    echo "== round $round of $rounds"
    "$rnn" bench train $quick $only --device cpu --json "$tmp/ours-$round.json"
    "$python" bench/train_bench.py $quick $only --threads "$threads" --json "$tmp/torch-$round.json"
    ours="${ours:+$ours,}$tmp/ours-$round.json"
    theirs="${theirs:+$theirs,}$tmp/torch-$round.json"
done

source bench/machine.sh
out="bench/results/${day}-train-${threads}core-${slug}.md"
mkdir -p bench/results

{
    echo "# Training benchmark: rnn vs PyTorch (CPU)"
    echo
    machine_lines
    echo "- workloads: one epoch over random MNIST-shaped data (MLP, CNN) or CIFAR-shaped data"
    echo "  (ResNet-8), batch 128, Adam(1e-3), shuffled; rnn through the Network API (MLP, CNN) or"
    echo "  a plain loop over rnn-nn modules (ResNet-8), PyTorch with nn modules and a plain loop"
    echo "- rounds: ${rounds}, run alternately; each workload's best epoch of its best round"
    echo
    python3 bench/compare.py "$ours" "$theirs" --markdown
} > "$out"

cat "$out"
echo
echo "wrote $out (raw JSON in $tmp)"
