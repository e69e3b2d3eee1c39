#!/usr/bin/env bash
# bf16 and f16 matmul against f32 on this CPU, rnn and PyTorch: runs `rnn bench cpu
# --matmul-only` and `bench/cpu_bench.py --matmul-only` alternately ROUNDS times (default 3),
# keeps each workload's best round, writes bench/results/<date>-matmul-lowp-<machine>.md.
set -euo pipefail
cd "$(dirname "$0")/.."

threads=$(nproc)
day=$(date +%F)
tmp=$(mktemp -d /tmp/rnn-bench-lowp.XXXXXX)
rounds=${ROUNDS:-3}
rnn_bin=${RNN_BIN:-target/release/rnn}
python=${PYTHON:-python3}
# machine.sh asks `python3` for torch's version: make it the one that runs the twin.
PATH="$(dirname "$(command -v "$python")"):$PATH"

[ -n "${RNN_BIN:-}" ] || cargo build --release -p rnn-cli
ours="" theirs=""
for round in $(seq 1 "$rounds"); do
    echo "== round $round of $rounds"
    "$rnn_bin" bench cpu --matmul-only --json "$tmp/ours-$round.json"
    "$python" bench/cpu_bench.py --matmul-only --threads "$threads" --json "$tmp/torch-$round.json"
    ours="${ours:+$ours,}$tmp/ours-$round.json"
    theirs="${theirs:+$theirs,}$tmp/torch-$round.json"
done

source bench/machine.sh
out="bench/results/${day}-matmul-lowp-${threads}core-${slug}.md"
flags=$(grep -o -w 'avx512bf16\|avx512_bf16\|avx512f\|avx2\|fma\|f16c' /proc/cpuinfo | sort -u | tr '\n' ' ')
{
    echo "# bf16 / f16 matmul against f32 on the CPU: rnn vs PyTorch"
    echo
    machine_lines
    echo "- threads: ${threads}; CPU flags of note: ${flags:-none}"
    echo "- rounds: ${rounds}, run alternately; each workload's best round is shown"
    echo
    echo "## Each dtype against f32, same library (GFLOP/s ratio)"
    echo
    "$python" - "$ours" "$theirs" <<'PY'
import sys
sys.path.insert(0, "bench")
from compare import load_best
ours, torch = (load_best(p) for p in sys.argv[1:3])
print("| size | rnn bf16/f32 | rnn f16/f32 | torch bf16/f32 | torch f16/f32 |")
print("|---|---|---|---|---|")
for n in (256, 512, 1024, 2048):
    cells = [f"{s[f'matmul_{t}_{n}']['value'] / s[f'matmul_f32_{n}']['value']:.2f}"
             if f"matmul_{t}_{n}" in s else "n/a (too slow)"
             for s in (ours, torch) for t in ("bf16", "f16")]
    print(f"| {n} | " + " | ".join(cells) + " |")
PY
    echo
    echo "## rnn against PyTorch, per workload"
    echo
    "$python" bench/compare.py "$ours" "$theirs" --markdown
} > "$out"

cat "$out"
echo
echo "wrote $out (raw JSON in $tmp)"
