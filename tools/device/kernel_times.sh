#!/usr/bin/env bash
# Kernel durations under Nsight Compute (the accelerator machine has ncu, not
# nsys): runs `rowlm bench --device cuda --no-ceilings ARGS...` with every
# kernel whose name matches REGEX profiled (each launch alone, CUDA graphs
# node by node) and prints the last COUNT launches: name, grid, block and
# gpu__time_duration in µs. The last launches are the last decode step's.
#   tools/device/kernel_times.sh REGEX COUNT ARGS...
# e.g. tools/device/kernel_times.sh attention 6 --shape e2b --layers 5 --batch 1 --context 32768 --decode-steps 2
# Needs build-cuda/rowlm (tools/device/build_cuda.sh). ncu's CSV, 0-based: column 4 the
# kernel, 7 and 8 block and grid, 12 the metric's name, 14 its value in ns
# (with thousands separators).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: kernel_times.sh REGEX COUNT BENCH_ARGS..." >&2; exit 2; }
regex=$1 count=$2
shift 2
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
csv=$(mktemp)
trap 'rm -f "$csv"' EXIT
"$ncu" --kernel-name "regex:$regex" --metrics gpu__time_duration.sum --csv --print-units base \
  build-cuda/rowlm bench --device cuda --no-ceilings --prefill 16 "$@" >"$csv" 2>/dev/null
python3 - "$csv" "$count" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 14 and r[12] == "gpu__time_duration.sum"]
print(f"{len(rows)} launches matched")
for r in rows[-int(sys.argv[2]):]:
    name = r[4].replace("rowlm::cuda::(anonymous namespace)::", "")[:70]
    print(f"{name:70s} grid {r[8]:>14s} block {r[7]:>12s} {float(r[14].replace(",", "")) / 1e3:10.1f} us")
PY
