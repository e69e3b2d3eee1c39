#!/usr/bin/env bash
# Data-parallel training on this machine's CPU: the `rnn train` MLP (784-512-256-10, batch 128
# per rank, Adam) as 1 rank x 1 thread, 1 rank x 2 threads and 2 ranks x 1 thread (mpirun),
# and the PyTorch DDP (gloo) twin (bench/ddp_bench.py) in the same three shapes, run
# alternately ROUNDS times (default 3). Also a control: two independent 1 x 1 runs at once,
# whose summed throughput is the most two ranks can reach on this machine whatever the
# communication costs. Writes bench/results/<date>-ddp-<machine>.md.
# Needs OpenMPI (mpirun) and python3 with torch. RNN=<binary> skips the build.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-3}
day=$(date +%F)
tmp=$(mktemp -d /tmp/rnn-bench-ddp.XXXXXX)
python=${PYTHON:-python3}
# machine.sh asks `python3` for torch's version: the one that runs the twin.
PATH="$(dirname "$(command -v "$python")"):$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ -z "${RNN:-}" ]; then
    cargo build --release -p rnn-cli --features mpi
    RNN=target/release/rnn
fi
# MPI_Allreduce alone on a buffer of the step's gradients (AR_BENCH=<binary> skips the build).
if [ -z "${AR_BENCH:-}" ]; then
    cargo build --release -p rnn-dist --features mpi --example allreduce_bench
    AR_BENCH=${CARGO_TARGET_DIR:-target}/release/examples/allreduce_bench
fi
# The MLP's 535,818 f32 parameters, and the mean loss that rides in the last bucket.
grad_bytes=$(((535818 + 1) * 4))
# OpenMPI's shared-memory transport copying through its own segment in 128 KB fragments
# instead of reading the peer's pages with process_vm_readv (CMA), which pins them page by
# page: on a 2-core VM the 2.1 MB all_reduce took 0.14 ms this way, 0.21 ms with CMA.
SHM=(--mca btl_vader_single_copy_mechanism none --mca btl_vader_max_send_size 131072 --mca btl_vader_eager_limit 65536)
# mpirun binds each rank to a core by default, where its communication thread would then
# take turns with its compute thread; OpenMPI's blocking calls also spin while they wait.
MPIRUN=(mpirun -np 2 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
# SAMPLES (default 30,000; a tenth is held out for validation): an epoch of about 1 s on this
# machine; with 10,000 a single epoch (0.4 s) scattered by +-15% between runs.
samples=${SAMPLES:-30000}
TRAIN=(train --device cpu --samples "$samples" --epochs 3 --batch-size 128 --quiet)

# Best epoch's samples/s of a history.json.
best() { "$python" -c 'import json,sys; print(max(json.load(open(sys.argv[1]))["samples_per_sec"]))' "$1/history.json"; }
# The share of the best epoch that rank 0 spent waiting for averaged gradients.
wait_share() {
    "$python" - "$1/history.json" <<'PY'
import json, sys
h = json.load(open(sys.argv[1]))
best = max(range(len(h["samples_per_sec"])), key=lambda e: h["samples_per_sec"][e])
print(h["comm_wait_seconds"][best] / h["epoch_times"][best])
PY
}

ours() {
    local name=$1 out="$tmp/$1"
    shift
    "$@" --out "$out" >/dev/null
    echo "$name $(best "$out")"
}

measure() {
    local busy
    busy=$(pgrep -c rustc || true)
    ours rnn_1x1 env RAYON_NUM_THREADS=1 "$RNN" "${TRAIN[@]}"
    ours rnn_1x2 env RAYON_NUM_THREADS=2 "$RNN" "${TRAIN[@]}"
    ours rnn_2x1 "${MPIRUN[@]}" -x RAYON_NUM_THREADS=1 "$RNN" "${TRAIN[@]}" --distributed
    echo "comm_wait_share_2x1 $(wait_share "$tmp/rnn_2x1")"
    # Buckets of 0.5 MB (5 for this model) instead of one: the first ones travel while
    # backward computes the rest.
    ours rnn_2x1_buckets_0.5mb "${MPIRUN[@]}" -x RAYON_NUM_THREADS=1 "$RNN" "${TRAIN[@]}" --distributed --bucket-mb 0.5
    echo "comm_wait_share_2x1_buckets_0.5mb $(wait_share "$tmp/rnn_2x1_buckets_0.5mb")"
    ours rnn_2x1_bound mpirun -np 2 --oversubscribe -x RAYON_NUM_THREADS=1 "$RNN" "${TRAIN[@]}" --distributed
    ours rnn_2x1_shm "${MPIRUN[@]}" "${SHM[@]}" -x RAYON_NUM_THREADS=1 "$RNN" "${TRAIN[@]}" --distributed
    echo "comm_wait_share_2x1_shm $(wait_share "$tmp/rnn_2x1_shm")"
    # Seconds per MPI_Allreduce of the gradients' bytes, nothing else running.
    echo "allreduce_seconds_cma $("${MPIRUN[@]}" "$AR_BENCH" raw "$grad_bytes" | cut -d, -f3)"
    echo "allreduce_seconds_shm $("${MPIRUN[@]}" "${SHM[@]}" "$AR_BENCH" raw "$grad_bytes" | cut -d, -f3)"
    # Whole-run wall times (data drawing and start-up included on both sides, so the
    # two runs overlap from start to end): one 1 x 1 run, then two at once.
    local t0 t1 t2
    t0=$(date +%s.%N)
    RAYON_NUM_THREADS=1 "$RNN" "${TRAIN[@]}" --out "$tmp/c0" >/dev/null
    t1=$(date +%s.%N)
    RAYON_NUM_THREADS=1 "$RNN" "${TRAIN[@]}" --out "$tmp/c1" >/dev/null &
    RAYON_NUM_THREADS=1 "$RNN" "${TRAIN[@]}" --out "$tmp/c2" >/dev/null
    wait
    t2=$(date +%s.%N)
    echo "control_two_1x1_at_once_vs_one $(echo "2 * ($t1 - $t0) / ($t2 - $t1)" | bc -l)"
    for shape in "1 1" "1 2" "2 1"; do
        set -- $shape
        echo "torch_${1}x${2} $("$python" bench/ddp_bench.py --ranks "$1" --threads "$2" --samples $((samples * 9 / 10)) --epochs 3 | awk '/samples_per_sec/ {print $2}')"
    done
    echo "rustc_processes_at_start $busy"
}

for round in $(seq 1 "$rounds"); do
    echo "== round $round of $rounds" >&2
    measure | tee "$tmp/round-$round.txt" >&2
done

source bench/machine.sh
out="bench/results/${day}-ddp-$(nproc)core-${slug}.md"
{
    echo "# Data-parallel training on the CPU: rnn vs PyTorch DDP (gloo)"
    echo
    machine_lines
    echo "- mpirun: $(mpirun --version | head -1)"
    echo "- workload: MLP 784-512-256-10, $((samples * 9 / 10)) training samples, batch 128 per rank, Adam(1e-3),"
    echo "  3 epochs, the best epoch's samples/s (all ranks' samples over the epoch's time)"
    echo "- 2 x 1 (rnn): \`${MPIRUN[*]} -x RAYON_NUM_THREADS=1 rnn train --distributed\`;"
    echo "  2 x 1 bound: mpirun's default binding (one core per rank); 2 x 1 shm: also \`${SHM[*]}\`"
    echo "- all_reduce alone: \`allreduce_bench raw $grad_bytes\` (crates/rnn-dist/examples) under the same mpirun"
    echo "- rounds: $rounds, run alternately; table: best of the rounds, then each round"
    echo
    "$python" - "$tmp" "$rounds" <<'PY'
import sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
runs = {}
for r in range(1, rounds + 1):
    for line in open(f"{tmp}/round-{r}.txt"):
        name, value = line.split()
        runs.setdefault(name, []).append(float(value))
busy = runs.pop("rustc_processes_at_start")
waits = {k: runs.pop(k) for k in [k for k in runs if k.startswith("comm_wait_share_")]}
control = runs.pop("control_two_1x1_at_once_vs_one")
allreduce = {k.removeprefix("allreduce_seconds_"): runs.pop(k) for k in [k for k in runs if k.startswith("allreduce_seconds_")]}
best = {k: max(v) for k, v in runs.items()}
print("| run | best samples/s | vs 1x1 of the same library | each round |")
print("|---|---|---|---|")
for name, values in runs.items():
    base = best[name.split("_")[0] + "_1x1"]
    rounds_text = ", ".join(f"{v:.0f}" for v in values)
    print(f"| {name} | {best[name]:.0f} | {best[name] / base:.2f}x | {rounds_text} |")
print()
print(f"- rustc processes running at the start of each round: {', '.join(str(int(b)) for b in busy)}")
print(f"- control: two independent rnn 1 x 1 runs at once do {max(control):.2f}x the work per second of one"
      f" (whole-run wall times; each round: {', '.join(f'{c:.2f}' for c in control)})")
for name, shares in waits.items():
    print(f"- {name.removeprefix('comm_wait_share_')}: rank 0 waited for averaged gradients"
          f" {100 * min(shares):.1f}% of its best epoch (each round: {', '.join(f'{100 * w:.1f}%' for w in shares)})")
# The most 2 x 1 can reach if the all_reduce (timed alone) is the only cost added to
# each rank's step and nothing overlaps it: 2 t / (t + t_allreduce), t the 1 x 1 step.
step = 128 / best["rnn_1x1"]
for name, secs in allreduce.items():
    t = min(secs)
    print(f"- MPI_Allreduce of the step's gradients alone ({name}): {1e3 * t:.3f} ms (each round:"
          f" {', '.join(f'{1e3 * s:.3f}' for s in secs)}); with the best 1 x 1 step ({1e3 * step:.3f} ms)"
          f" the most 2 x 1 can reach is {2 * step / (step + t):.2f}x")
print(f"- goal 2 x 1 >= 1.8x of 1 x 1: rnn {best['rnn_2x1'] / best['rnn_1x1']:.2f}x"
      f" ({best['rnn_2x1_shm'] / best['rnn_1x1']:.2f}x with the shm settings),"
      f" PyTorch DDP {best['torch_2x1'] / best['torch_1x1']:.2f}x")
PY
} > "$out"
cat "$out"
echo "wrote $out (raw runs in $tmp)"
