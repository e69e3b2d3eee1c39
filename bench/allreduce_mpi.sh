#!/usr/bin/env bash
# all_reduce bandwidth of rnn-dist's MPI process group against raw MPI_Allreduce (from a send
# to a receive buffer, in place as the group calls it, and nonblocking in place), 2 ranks on
# this machine, through the queue to the rank's communication thread and (RNN_DIST_DIRECT=1) on
# the caller's thread, and of the in-process group of 2 threads
# (crates/rnn-dist/examples/allreduce_bench.rs). Prints one table: per size, the GB/s of each
# mode, and each mode's bandwidth over raw MPI's.
#   bench/allreduce_mpi.sh [ranks]        (OpenMPI; run as root it allows itself)
set -euo pipefail
cd "$(dirname "$0")/.."
NP="${1:-2}"
cargo build --release -q -p rnn-dist --features mpi --example allreduce_bench
BIN="${CARGO_TARGET_DIR:-target}/release/examples/allreduce_bench"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT="$(mktemp)"
for mode in raw raw-in-place raw-in-place-serialized raw-nonblocking group group-sync group-slice; do
    mpirun -np "$NP" --oversubscribe "$BIN" "$mode" >>"$OUT"
done
mpirun -np "$NP" --oversubscribe -x RNN_DIST_CHECKS=0 "$BIN" group >>"$OUT"
# The waiting call on the caller's thread (RNN_DIST_DIRECT=1), with and without the header check.
mpirun -np "$NP" --oversubscribe -x RNN_DIST_DIRECT=1 "$BIN" group-sync >>"$OUT"
mpirun -np "$NP" --oversubscribe -x RNN_DIST_DIRECT=1 -x RNN_DIST_CHECKS=0 "$BIN" group-sync >>"$OUT"
# The in-process group of 2 threads (no MPI), for comparison.
"$BIN" threads >>"$OUT"
"$BIN" threads-sync >>"$OUT"
python3 - "$OUT" <<'PY'
import sys, collections
rows = [l.strip().split(",") for l in open(sys.argv[1]) if l.count(",") == 3]
by = collections.defaultdict(dict)
for mode, size, sec, gbs in rows:
    by[int(size)][mode] = (float(sec), float(gbs))
modes = [m for m in ["raw", "raw-in-place", "raw-in-place-serialized", "raw-nonblocking", "group", "group-unchecked", "group-sync", "group-direct", "group-direct-unchecked", "group-slice", "threads2", "threads2-sync"] if any(m in v for v in by.values())]
print("| bytes | " + " | ".join(f"{m} GB/s" for m in modes) + " | " + " | ".join(f"{m}/raw" for m in modes[1:]) + " |")
print("|" + "---|" * (1 + 2 * len(modes) - 1))
for size in sorted(by):
    v = by[size]
    bw = [f"{v[m][1]:.3f}" if m in v else "-" for m in modes]
    ratio = [f"{v[m][1] / v['raw'][1]:.2f}" if m in v and "raw" in v else "-" for m in modes[1:]]
    print(f"| {size} | " + " | ".join(bw) + " | " + " | ".join(ratio) + " |")
PY
# Direct calls against raw MPI_Allreduce alternating in one launch (launches vary in speed).
mpirun -np "$NP" --oversubscribe -x RNN_DIST_DIRECT=1 "$BIN" direct-vs-raw >"$OUT"
echo
python3 - "$OUT" <<'PY'
import sys, collections
by = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    if line.count(",") == 3:
        mode, size, sec, gbs = line.strip().split(",")
        by[int(size)][mode] = float(gbs)
print("Alternating in one launch with RNN_DIST_DIRECT=1 (MPI_THREAD_SERIALIZED), best of 3 rounds:")
print("| bytes | raw-same-launch GB/s | direct GB/s | direct-unchecked GB/s | direct/raw | direct-unchecked/raw |")
print("|---|---|---|---|---|---|")
for size in sorted(by):
    v = by[size]
    raw, d, du = v["raw-same-launch"], v["direct"], v["direct-unchecked"]
    print(f"| {size} | {raw:.3f} | {d:.3f} | {du:.3f} | {d / raw:.2f} | {du / raw:.2f} |")
PY
rm -f "$OUT"
