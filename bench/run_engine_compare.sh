#!/usr/bin/env bash
# Compares two builds of the `rnn` binary (e.g. before and after an engine change) on the
# same benchmarks in one run: the two binaries run alternately, ROUNDS times each, so that a
# change in machine load hits both alike; each workload's best value per binary counts.
#
#   bench/run_engine_compare.sh BEFORE_RNN AFTER_RNN
#
# Environment:
#   ROUNDS        alternating rounds (default 2)
#   GPU_DEVICE    device of `rnn bench gpu` (default wgpu:0; "none" skips the GPU suite)
#   GPU_ARGS      arguments of `rnn bench gpu` (default --quick)
#   TRAIN_DEVICE  device of `rnn bench train` (default cpu; "none" skips it)
#   TRAIN_ARGS    arguments of `rnn bench train` (default --quick)
#   OUT           folder for the JSON files (default: a new temporary folder)
# For lavapipe set WGPU_BACKEND=vulkan (and XDG_RUNTIME_DIR if unset).
#
# Prints one table per suite: name, metric, before, after, after/before, and whether the
# after build is better (by more than 3%), worse, or the same.
set -euo pipefail

if [[ $# -ne 2 ]]; then
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
before=$1 after=$2
for bin in "$before" "$after"; do
    [[ -x $bin ]] || { echo "not an executable: $bin" >&2; exit 2; }
done

rounds=${ROUNDS:-2}
gpu_device=${GPU_DEVICE:-wgpu:0}
read -r -a gpu_args <<< "${GPU_ARGS:---quick}"
train_device=${TRAIN_DEVICE:-cpu}
read -r -a train_args <<< "${TRAIN_ARGS:---quick}"
out=${OUT:-$(mktemp -d -t rnn-engine-compare.XXXXXX)}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)

echo "before: $before ($("$before" --version))"
echo "after:  $after ($("$after" --version))"
echo "rounds: $rounds, JSON files in $out"
source "$here/machine.sh"
echo "machine: ${model}, $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg)"

run_suite() { # suite label binary round
    local suite=$1 label=$2 bin=$3 round=$4 file="$out/$1-$2-$4.json"
    case $suite in
        gpu) "$bin" bench gpu --device "$gpu_device" "${gpu_args[@]}" --json "$file" >"$file.log" ;;
        train) "$bin" bench train --device "$train_device" "${train_args[@]}" --json "$file" >"$file.log" ;;
    esac
    echo "  $suite $label round $round done"
}

suites=()
[[ $gpu_device != none ]] && suites+=(gpu)
[[ $train_device != none ]] && suites+=(train)
for suite in "${suites[@]}"; do
    for round in $(seq 1 "$rounds"); do
        # Alternate which binary goes first, so neither always runs on a warmer machine.
        if (( round % 2 )); then order=(before after); else order=(after before); fi
        for label in "${order[@]}"; do
            bin=$before
            [[ $label == after ]] && bin=$after
            run_suite "$suite" "$label" "$bin" "$round"
        done
    done
done

python3 - "$out" "${suites[@]}" <<'EOF'
import glob, json, os, sys

out, suites = sys.argv[1], sys.argv[2:]

def best(files):
    """Each workload's best value over the rounds (higher or lower, as its record says)."""
    values = {}
    for path in files:
        for r in json.load(open(path)):
            key = r["name"]
            old = values.get(key)
            better = old is None or (r["value"] > old["value"]) == r["higher_is_better"]
            if better:
                values[key] = r
    return values

for suite in suites:
    before = best(sorted(glob.glob(os.path.join(out, f"{suite}-before-*.json"))))
    after = best(sorted(glob.glob(os.path.join(out, f"{suite}-after-*.json"))))
    print(f"\n## rnn bench {suite}: after / before\n")
    print("| name | metric | before | after | after/before | |")
    print("|---|---|---|---|---|---|")
    for name, b in before.items():
        a = after.get(name)
        if a is None:
            print(f"| {name} | {b['metric']} | {b['value']:.4g} | (missing) | | |")
            continue
        ratio = a["value"] / b["value"] if b["value"] else float("nan")
        gain = ratio if b["higher_is_better"] else 1 / ratio
        verdict = "better" if gain > 1.03 else "worse" if gain < 1 / 1.03 else "same"
        print(f"| {name} | {b['metric']} | {b['value']:.4g} | {a['value']:.4g} | {ratio:.3f} | {verdict} |")
    for name in after.keys() - before.keys():
        print(f"| {name} | {after[name]['metric']} | (missing) | {after[name]['value']:.4g} | | |")
EOF
