# Sourced by the run_*.sh scripts: names this machine for result file names and headers.
# Sets $model (the CPU model) and $slug (a file-name form of it) and defines
# machine_lines, which prints the machine / toolchain lines of a results header.

# sed reads all of lscpu's output (no early exit), so pipefail cannot trip on SIGPIPE.
model=$(lscpu | sed -n '0,/^Model name:/s/^Model name:[[:space:]]*//p')
model=${model:-unknown-cpu}
slug=$(printf '%s' "$model" | tr '[:upper:]' '[:lower:]' | tr -cs 'a-z0-9' '-' \
    | sed 's/^-*//; s/-*$//')

machine_lines() {
    echo "- date: $(date +%F)"
    echo "- machine: ${model}, $(nproc) cores (nproc), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM"
    echo "- rustc: $(rustc --version)"
    echo "- torch: $("${python:-python3}" -c 'import torch; print(torch.__version__)')"
}
