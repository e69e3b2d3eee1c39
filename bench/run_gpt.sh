#!/usr/bin/env bash
# Trains the character-level GPT with `rnn train --model gpt` and its PyTorch twin
# (bench/gpt_twin.py) from the same initial weights, on the same batches, for the same steps,
# and prints both validation losses, their ratio and the mean training-step times (same thread
# count). Writes bench/results/<date>-gpt-cpu-<threads>core-<machine>.md.
# Settings (environment): STEPS (default 1000), DATA (default the built-in King James Bible),
# BATCH (32), CONTEXT (64), D_MODEL (128), LAYERS (4), HEADS (4), SEED (42), THREADS (nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

steps=${STEPS:-1000}
data=${DATA:-crates/rnn-train/data/kjv.txt.gz}
batch=${BATCH:-32} context=${CONTEXT:-64} d_model=${D_MODEL:-128} layers=${LAYERS:-4} heads=${HEADS:-4}
seed=${SEED:-42}
threads=${THREADS:-$(nproc)}
python=${PYTHON:-python3}
tmp=$(mktemp -d /tmp/rnn-bench-gpt.XXXXXX)
bin=${RNN_BIN:-target/release/rnn}

[ -n "${RNN_BIN:-}" ] || cargo build --release -p rnn-cli
model_args=(--steps "$steps" --batch-size "$batch" --context "$context" --d-model "$d_model" --layers "$layers"
    --heads "$heads" --seed "$seed")
echo "== rnn"
RAYON_NUM_THREADS=$threads "$bin" train --model gpt --data "text:$data" --device cpu "${model_args[@]}" \
    --sample-every 0 --save-init --out "$tmp/ours"
echo "== PyTorch twin"
"$python" bench/gpt_twin.py --init "$tmp/ours/init.safetensors" --data "$data" --steps "$steps" \
    --batch-size "$batch" --seed "$seed" --threads "$threads" --json "$tmp/twin.json"

# machine.sh asks `python3` for the torch version: make it the one that runs the twin.
case "$python" in */*) PATH="$(dirname "$python"):$PATH" ;; esac
source bench/machine.sh
day=$(date +%F)
out="bench/results/${day}-gpt-cpu-${threads}core-${slug}.md"
summary=$("$python" - "$tmp/ours/history.json" "$tmp/twin.json" <<'PY'
import json, sys
ours, twin = (json.load(open(p)) for p in sys.argv[1:3])
# The first report's steps include start-up (allocation, first kernels): compare the rest.
mean = lambda h: sum(h["step_seconds"][1:] or h["step_seconds"]) / len(h["step_seconds"][1:] or h["step_seconds"])
print("| step | rnn val loss | PyTorch val loss | ratio |")
print("|---|---|---|---|")
for s, a, b in zip(ours["step"], ours["val_loss"], twin["val_loss"]):
    print(f"| {s} | {a:.4f} | {b:.4f} | {a / b:.4f} |")
a, b = ours["val_loss"][-1], twin["val_loss"][-1]
print()
print(f"final validation loss: rnn {a:.4f}, PyTorch {b:.4f}, ratio {a / b:.4f} (goal: within 2%)")
ta, tb = mean(ours), mean(twin)
print(f"training step: rnn {ta * 1e3:.1f} ms, PyTorch {tb * 1e3:.1f} ms, ratio {ta / tb:.2f}x (goal: <= 1.0x)")
PY
)
mkdir -p bench/results
{
    echo "# Character-level GPT: rnn vs its PyTorch twin (CPU)"
    echo
    machine_lines
    echo "- data: $data; model: $layers layers, d_model $d_model, $heads heads, context $context, dropout 0"
    echo "- training: $steps steps, batch $batch, AdamW(1e-3, betas 0.9/0.99, wd 0.1), clip 1.0, seed $seed,"
    echo "  the same initial weights and batches on both sides; $threads threads each"
    echo
    echo "$summary"
} > "$out"
cat "$out"
echo
echo "wrote $out (raw output in $tmp)"
