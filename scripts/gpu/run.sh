#!/usr/bin/env bash
# Runs on a machine with an NVIDIA GPU and driver, from the folder scripts/gpu/build.sh made
# (no cargo needed). Writes everything to $OUT (default ./gpu-results):
#   machine.txt      nvidia-smi, `rnn devices`, the CUDA libraries found
#   tests.txt        the core test suite and the NCCL tests with the CUDA device required
#                    (tests/<binary>.txt each), and the attention tests once more on the
#                    scalar 16-bit kernels of GPUs before Ampere (RNN_CUDA_TENSOR_CORES=0)
#   bench.txt/json   `rnn bench gpu` on cuda:0, and torch.txt the PyTorch twin in the same run
#   attention.txt/json  `rnn bench attention --device cuda:0`: fused attention in bf16,
#                    forward and backward TFLOP/s; torch_attention.json the twin (torch's
#                    flash backend), attention_compare.md the two against the goals
#   memcheck.txt     compute-sanitizer memcheck (out-of-bounds and misaligned accesses) over
#                    the op, gradient and attention tests (the attention reference cases in
#                    SANITIZER_CASES), when it is installed (last: it is the slowest stage). No leak check: the caching pool and the per-device
#                    handles keep their device memory until the process ends, by design.
#   racecheck.txt    compute-sanitizer racecheck (shared-memory hazards: a missing barrier)
#                    over the attention tests, whose tensor-core tiles warps share, on the
#                    reference cases in SANITIZER_CASES (the sanitizers are too slow for all).
# Every stage has a time limit (seconds, from the environment), so one hung kernel costs
# its stage, not the run: TEST_TIMEOUT per test binary, BENCH_TIMEOUT per benchmark,
# MEMCHECK_TIMEOUT per sanitized binary, RACECHECK_TIMEOUT for the race check. TEST_JOBS test
# binaries run at once.
set -uo pipefail
cd "$(dirname "$0")"
if [ ! -d bin ]; then
    tar -xJf bin.tar.xz 2>/dev/null ||
        python3 -c 'import tarfile; tarfile.open("bin.tar.xz").extractall()' || { echo "cannot unpack bin.tar.xz" >&2; exit 1; }
fi
OUT=${OUT:-gpu-results}
mkdir -p "$OUT/tests"
export RNN_REQUIRE_GPU=cuda RNN_GPU_DEVICE=${RNN_GPU_DEVICE:-cuda:0}
export RNN_CUDA_CACHE_PATH=${RNN_CUDA_CACHE_PATH:-$PWD/ptx-cache}
TEST_TIMEOUT=${TEST_TIMEOUT:-600} BENCH_TIMEOUT=${BENCH_TIMEOUT:-600}
MEMCHECK_TIMEOUT=${MEMCHECK_TIMEOUT:-1200} RACECHECK_TIMEOUT=${RACECHECK_TIMEOUT:-600} TEST_JOBS=${TEST_JOBS:-4}
status=0

{
    nvidia-smi || true
    ldconfig -p | grep -E 'libcuda\.|nvrtc|cublas|nccl|libmpi\.' || true
    timeout 60 ./bin/rnn devices
} > "$OUT/machine.txt" 2>&1

# One test binary; its log goes to tests/<name>.txt (the binary's name unless a second argument
# names it; further arguments filter the tests), a failure or a timeout is named in it. Of the
# distributed tests only the CUDA arms run here (the others start mpirun, and run in CI);
# RNN_REQUIRE_NCCL=1 makes them fail where NCCL did not do the reducing.
run_test() {
    local t=$1 log="$OUT/tests/${2:-$(basename "$1")}.txt" filter=("${@:3}")
    case "$(basename "$t")" in test-collectives | test-distributed) filter=(::cuda) ;; esac
    RNN_REQUIRE_NCCL=1 timeout "$TEST_TIMEOUT" "$t" "${filter[@]}" --test-threads=4 > "$log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || echo "FAILED: $t (exit $rc$([ $rc -eq 124 ] && echo ", timed out after ${TEST_TIMEOUT} s"))" >> "$log"
    return $rc
}
export -f run_test
export OUT TEST_TIMEOUT
ls bin/test-* | xargs -P "$TEST_JOBS" -I{} bash -c 'run_test {}' || status=1
# The attention tests again on the scalar kernels a GPU before Ampere runs for f16 / bf16.
if [ -x bin/test-attention ]; then
    RNN_CUDA_TENSOR_CORES=0 run_test bin/test-attention test-attention-scalar cuda || status=1
fi
for log in "$OUT"/tests/*.txt; do echo "== $log"; cat "$log"; done > "$OUT/tests.txt"
grep -E "^test result|^FAILED|panicked" "$OUT/tests.txt"

timeout "$BENCH_TIMEOUT" ./bin/rnn bench gpu --device cuda:0 --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1 || status=1
timeout "$BENCH_TIMEOUT" ./bin/rnn bench attention --device cuda:0 --json "$OUT/attention.json" > "$OUT/attention.txt" 2>&1 ||
    status=1
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    timeout "$BENCH_TIMEOUT" python3 gpu_bench.py --json "$OUT/torch.json" > "$OUT/torch.txt" 2>&1 || status=1
    timeout "$BENCH_TIMEOUT" python3 attention_gpu_bench.py --json > "$OUT/torch_attention.json" 2> "$OUT/torch_attention.txt" ||
        status=1
    python3 compare.py "$OUT/attention.json" "$OUT/torch_attention.json" --markdown > "$OUT/attention_compare.md" 2>&1 ||
        status=1
fi
cat "$OUT/bench.txt" "$OUT/attention.txt"

if command -v compute-sanitizer >/dev/null 2>&1; then
    # Head dims 32, 64 and 128, causal, key padding, a broadcast bias with its gradient, Nq != Nk.
    export RNN_ATTENTION_CASES=${SANITIZER_CASES:-tile_plus_one,causal_tile_plus_one,causal_nq_gt_nk_d128,padding,bias_broadcast_grad,nq_ne_nk_dv_ne_d}
    echo "RNN_ATTENTION_CASES=$RNN_ATTENTION_CASES" | tee "$OUT/memcheck.txt" > "$OUT/racecheck.txt"
    for t in bin/test-ops bin/test-gradcheck bin/test-window bin/test-attention bin/test-fused_nn; do
        [ -x "$t" ] || continue
        timeout "$MEMCHECK_TIMEOUT" compute-sanitizer --tool memcheck --error-exitcode 9 "$t" cuda \
            --test-threads=1 >> "$OUT/memcheck.txt" 2>&1 || { status=1; echo "MEMCHECK FAILED: $t" >> "$OUT/memcheck.txt"; }
    done
    grep -E "ERROR SUMMARY|FAILED" "$OUT/memcheck.txt"
    timeout "$RACECHECK_TIMEOUT" compute-sanitizer --tool racecheck --error-exitcode 9 bin/test-attention cuda \
        --test-threads=1 >> "$OUT/racecheck.txt" 2>&1 || { status=1; echo "RACECHECK FAILED" >> "$OUT/racecheck.txt"; }
    grep -E "ERROR SUMMARY|RACECHECK FAILED" "$OUT/racecheck.txt"
fi
exit $status
