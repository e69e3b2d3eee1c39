# Sourced by the run_*.sh scripts: names this machine for result file names and headers.
# Sets $model (the CPU model) and $slug (a file-name form of it) and defines
# machine_lines, which prints the machine / toolchain lines of a results header.

# sed reads all of lscpu's output (no early exit), so pipefail cannot trip on SIGPIPE.
model=$(lscpu | sed -n '0,/^Model name:/s/^Model name:[[:space:]]*//p')
model=${model:-unknown-cpu}
slug=$(printf '%s' "$model" | tr '[:upper:]' '[:lower:]' | tr -cs 'a-z0-9' '-' \
    | sed 's/^-*//; s/-*$//')

# The CPU's family / model and its vector extensions of note: one model name covers CPUs
# from AVX2-only to AVX-512 with BF16, which change every kernel's speed.
cpu_line() {
    local family cpu_model flags
    family=$(sed -n '0,/^cpu family/s/^cpu family[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo)
    cpu_model=$(sed -n '0,/^model[[:space:]]*:/s/^model[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo)
    flags=$(grep -o -w 'avx2\|fma\|f16c\|avx512f\|avx512_bf16\|avx512_fp16\|amx_bf16' /proc/cpuinfo | sort -u | paste -sd ' ')
    echo "- CPU: family ${family:-?} model ${cpu_model:-?}; vector extensions: ${flags:-none}"
}

machine_lines() {
    echo "- date: $(date +%F)"
    echo "- machine: ${model}, $(nproc) cores (nproc), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM"
    cpu_line
    echo "- rustc: $(rustc --version)"
    echo "- torch: $("${python:-python3}" -c 'import torch; print(torch.__version__)')"
}
