#!/usr/bin/env bash
# Runs on a machine with an NVIDIA GPU and driver, from the folder scripts/gpu/build.sh made
# (no cargo needed). Writes everything to $OUT (default ./gpu-results):
#   tests.txt        the core test suite with the CUDA device required
#   memcheck.txt     the same under compute-sanitizer memcheck, when it is installed
#   bench.txt/json   `rnn bench gpu` on cuda:0, and torch.txt the PyTorch twin in the same run
#   attention.txt/json  `rnn bench attention --device cuda:0`: fused attention in bf16,
#                    forward and backward TFLOP/s; torch_attention.json the twin (torch's
#                    flash backend), attention_compare.md the two against the goals
set -uo pipefail
cd "$(dirname "$0")"
if [ ! -d bin ]; then
    tar -xJf bin.tar.xz 2>/dev/null ||
        python3 -c 'import tarfile; tarfile.open("bin.tar.xz").extractall()' || { echo "cannot unpack bin.tar.xz" >&2; exit 1; }
fi
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
export RNN_REQUIRE_GPU=cuda RNN_GPU_DEVICE=${RNN_GPU_DEVICE:-cuda:0}
export RNN_CUDA_CACHE_PATH=${RNN_CUDA_CACHE_PATH:-$PWD/ptx-cache}
status=0

{ nvidia-smi || true; ./bin/rnn devices; } > "$OUT/machine.txt" 2>&1

for t in bin/test-*; do
    echo "== $t" >> "$OUT/tests.txt"
    "$t" --test-threads=4 >> "$OUT/tests.txt" 2>&1 || { status=1; echo "FAILED: $t" >> "$OUT/tests.txt"; }
done
grep -E "^test result|FAILED" "$OUT/tests.txt"

if command -v compute-sanitizer >/dev/null 2>&1; then
    for t in bin/test-ops bin/test-gradcheck bin/test-window bin/test-attention bin/test-fused_nn; do
        [ -x "$t" ] || continue
        compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$t" cuda --test-threads=1 \
            >> "$OUT/memcheck.txt" 2>&1 || { status=1; echo "MEMCHECK FAILED: $t" >> "$OUT/memcheck.txt"; }
    done
    grep -E "ERROR SUMMARY|FAILED" "$OUT/memcheck.txt"
fi

./bin/rnn bench gpu --device cuda:0 --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1 || status=1
./bin/rnn bench attention --device cuda:0 --json "$OUT/attention.json" > "$OUT/attention.txt" 2>&1 || status=1
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    python3 gpu_bench.py --json "$OUT/torch.json" > "$OUT/torch.txt" 2>&1 || status=1
    python3 attention_gpu_bench.py --json > "$OUT/torch_attention.json" 2> "$OUT/torch_attention.txt" || status=1
    python3 compare.py "$OUT/attention.json" "$OUT/torch_attention.json" --markdown > "$OUT/attention_compare.md" 2>&1 ||
        status=1
fi
cat "$OUT/bench.txt"
exit $status
