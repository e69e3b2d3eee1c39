#!/usr/bin/env bash
# Build rnn, run the CPU benchmark for rnn and PyTorch, write bench/results/<date>-cpu-<machine>.md
# The sides run alternately ROUNDS times (default 3); each workload's best run counts.
# PyTorch runs twice per round: as installed, and with THP_MEM_ALLOC_ENABLE=1, which gives
# its large buffers the same huge-page hint rnn uses, so the second table compares the
# kernels without that allocation advantage.
# PYTHON picks the interpreter that has torch (default python3); RNN_BIN a prebuilt rnn
# binary (default: build target/release/rnn). ONLY=memory (or ONLY=matmul) runs just those
# rows on both sides (`--memory-only` / `--matmul-only`).
set -euo pipefail
cd "$(dirname "$0")/.."

threads=$(nproc)
day=$(date +%F)
tmp=$(mktemp -d /tmp/rnn-bench-cpu.XXXXXX)
rounds=${ROUNDS:-3}
python=${PYTHON:-python3}
bin=${RNN_BIN:-target/release/rnn}
only=()
case "${ONLY:-}" in
    "") ;;
    memory | matmul) only=("--${ONLY}-only") ;;
    *) echo "ONLY must be memory or matmul, got '${ONLY}'" >&2; exit 2 ;;
esac

[ -n "${RNN_BIN:-}" ] || cargo build --release -p rnn-cli
ours="" theirs="" theirs_thp=""
for round in $(seq 1 "$rounds"); do
    echo "== round $round of $rounds"
    "$bin" bench cpu "${only[@]}" --json "$tmp/ours-$round.json"
    "$python" bench/cpu_bench.py "${only[@]}" --threads "$threads" --json "$tmp/torch-$round.json"
    THP_MEM_ALLOC_ENABLE=1 "$python" bench/cpu_bench.py "${only[@]}" --threads "$threads" --json "$tmp/torch-thp-$round.json"
    ours="${ours:+$ours,}$tmp/ours-$round.json"
    theirs="${theirs:+$theirs,}$tmp/torch-$round.json"
    theirs_thp="${theirs_thp:+$theirs_thp,}$tmp/torch-thp-$round.json"
done

# machine.sh asks `python3` for the torch version: make it the one that ran the twin.
case "$python" in */*) PATH="$(dirname "$python"):$PATH" ;; esac
source bench/machine.sh
out="bench/results/${day}-cpu${ONLY:+-$ONLY}-${threads}core-${slug}.md"
mkdir -p bench/results

{
    echo "# CPU benchmark: rnn vs PyTorch"
    echo
    machine_lines
    echo "- threads: ${threads}"
    echo "- rounds: ${rounds}, run alternately; each workload's best round is shown"
    echo
    echo "## Against PyTorch as installed (the goals)"
    echo
    python3 bench/compare.py "$ours" "$theirs" --markdown
    echo
    echo "## Against PyTorch with THP_MEM_ALLOC_ENABLE=1 (huge pages for both)"
    echo
    python3 bench/compare.py "$ours" "$theirs_thp" --markdown
} > "$out"

cat "$out"
echo
echo "wrote $out (raw JSON in $tmp)"
