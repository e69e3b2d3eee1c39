#!/usr/bin/env bash
# Builds, on any Linux machine with a Rust toolchain (no GPU or CUDA toolkit needed), what a
# CUDA machine needs to test and benchmark this repository without cargo:
#   gpu-build/bin.tar.xz   the rnn-core test binaries with the CUDA backend, and the `rnn` CLI
#   gpu-build/run.sh       unpacks and runs them (see scripts/gpu/README.md)
# Release mode, stripped, xz-compressed: the binaries share most of their code, so the archive
# is a fraction of their size; the bundle must stay under 64 MiB. gpu-build/ is git-ignored.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=gpu-build
rm -rf "$OUT" && mkdir -p "$OUT/bin"

# Test binaries of the core suite, of the layers, losses and optimizers, and of the NCCL
# collectives; every `test_device!` body gets a CUDA arm. wgpu is left out to keep the binaries small (the wgpu
# suite runs in CI on lavapipe).
{
    cargo test --release -p rnn-core --no-default-features --features cuda --no-run --message-format=json
    cargo test --release -p rnn-nn --no-default-features --features cuda --no-run --message-format=json
    cargo test --release -p rnn --features cuda --test gpu_api --no-run --message-format=json
    # NCCL: the one-process group's CUDA collectives and data-parallel training on the GPU
    # (they link the system's MPI, libmpi.so.40, as the nccl feature needs mpi).
    cargo test --release -p rnn-dist --features nccl --test collectives --no-run --message-format=json
    cargo test --release -p rnn-train --features cuda,rnn-dist/nccl --test distributed --no-run --message-format=json
} | python3 -c '
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["profile"]["test"]:
        print(msg["executable"])
' | while read -r exe; do
    name=$(basename "$exe" | sed 's/-[0-9a-f]*$//')
    cp "$exe" "$OUT/bin/test-$name"
done

# The CLI with CUDA and wgpu, for `rnn devices`, `rnn bench gpu` and `rnn train`.
cargo build --release -p rnn-cli --features cuda
cp target/release/rnn "$OUT/bin/rnn"

strip "$OUT"/bin/* 2>/dev/null || true
ls -la "$OUT/bin"
echo "binaries: $(du -sm "$OUT/bin" | cut -f1) MiB before compression"
# -9 keeps a 64 MiB window, so the code the binaries share is stored once.
tar -C "$OUT" -cf - bin | xz -9 -T0 > "$OUT/bin.tar.xz"
rm -rf "$OUT/bin"
cp scripts/gpu/run.sh bench/gpu_bench.py bench/attention_gpu_bench.py bench/timing.py bench/compare.py "$OUT/"
size=$(du -sm "$OUT" | cut -f1)
echo "gpu-build: ${size} MiB"
if [ "$size" -ge 64 ]; then
    echo "the bundle is over 64 MiB" >&2
    exit 1
fi
