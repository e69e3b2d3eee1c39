#!/usr/bin/env bash
# Build rnn, run the CPU benchmark for rnn and PyTorch, write bench/results/<date>-cpu-<machine>.md
set -euo pipefail
cd "$(dirname "$0")/.."

threads=$(nproc)
day=$(date +%F)
tmp=$(mktemp -d /tmp/rnn-bench-cpu.XXXXXX)
ours="$tmp/ours.json"
theirs="$tmp/torch.json"

cargo build --release -p rnn-cli
target/release/rnn bench cpu --json "$ours"
python3 bench/cpu_bench.py --threads "$threads" --json "$theirs"

# sed reads all of lscpu's output (no early exit), so pipefail cannot trip on SIGPIPE.
model=$(lscpu | sed -n '0,/^Model name:/s/^Model name:[[:space:]]*//p')
model=${model:-unknown-cpu}
slug=$(printf '%s' "$model" | tr '[:upper:]' '[:lower:]' | tr -cs 'a-z0-9' '-' \
    | sed 's/^-*//; s/-*$//')
out="bench/results/${day}-cpu-${threads}core-${slug}.md"
mkdir -p bench/results

{
    echo "# CPU benchmark: rnn vs PyTorch"
    echo
    echo "- date: ${day}"
    echo "- machine: ${model}, ${threads} cores (nproc), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM"
    echo "- rustc: $(rustc --version)"
    echo "- torch: $(python3 -c 'import torch; print(torch.__version__)')"
    echo "- threads: ${threads}"
    echo
    python3 bench/compare.py "$ours" "$theirs" --markdown
} > "$out"

cat "$out"
echo
echo "wrote $out (raw JSON in $tmp)"
