#!/usr/bin/env bash
# Build rnn, run `rnn bench attention` and its PyTorch twin (bench/attention_bench.py)
# alternately ROUNDS times (default 2), write bench/results/<date>-attention-cpu-<machine>.md.
# Each workload's best round counts. RNN_BIN names a prebuilt binary (skips the build);
# PYTHON the interpreter with torch (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."

threads=$(nproc)
day=$(date +%F)
tmp=$(mktemp -d /tmp/rnn-bench-attention.XXXXXX)
rounds=${ROUNDS:-2}
python=${PYTHON:-python3}

if [[ -z "${RNN_BIN:-}" ]]; then
    cargo build --release -p rnn-cli
    RNN_BIN=target/release/rnn
fi
ours="" theirs=""
for round in $(seq 1 "$rounds"); do
    echo "== round $round of $rounds"
    "$RNN_BIN" bench attention --threads "$threads" --json "$tmp/ours-time-$round.json"
    # Peak memory as torch's is measured (resident-set growth, large buffers mapped); no timing.
    MALLOC_MMAP_THRESHOLD_=65536 "$RNN_BIN" bench attention --threads "$threads" --rss --json "$tmp/ours-rss-$round.json"
    # One file per round: the timed run's records and the memory run's attnrss_ rows.
    "$python" -c 'import json, sys; json.dump(sum((json.load(open(p)) for p in sys.argv[2:]), []), open(sys.argv[1], "w"))' \
        "$tmp/ours-$round.json" "$tmp/ours-time-$round.json" "$tmp/ours-rss-$round.json"
    "$python" bench/attention_bench.py --threads "$threads" --json "$tmp/torch-$round.json"
    ours="${ours:+$ours,}$tmp/ours-$round.json"
    theirs="${theirs:+$theirs,}$tmp/torch-$round.json"
done

source bench/machine.sh
out="bench/results/${day}-attention-cpu-${threads}core-${slug}.md"
mkdir -p bench/results
{
    echo "# CPU attention benchmark: rnn vs PyTorch scaled_dot_product_attention"
    echo
    machine_lines
    echo "- threads: ${threads}; B=4, H=8, D=64, f32 (gpt rows: B=32, H=4, N=64, D=32, causal); fwdbwd = forward + backward of sum(o)"
    echo "- rounds: ${rounds}, run alternately; each workload's best round is shown"
    echo "- peak MB: extra memory of one call. attnmem_ rows: live heap bytes on both sides (rnn's counting"
    echo "  allocator; torch's profiler memory events, see attention_bench.py); attnrss_ rows: growth of"
    echo "  the peak resident set on both sides (MALLOC_MMAP_THRESHOLD_=65536, \`rnn bench attention --rss\`)"
    echo
    "$python" bench/compare.py "$ours" "$theirs" --markdown
} > "$out"
cat "$out"
echo
echo "wrote $out (raw JSON in $tmp)"
