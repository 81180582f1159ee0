#!/usr/bin/env bash
# One GPU call: Chrome traces of training steps 101-130 (tr2.profile_run --trace) and their launch gaps
# (scripts/timeline.py), bfloat16: the cupy side with its whole-step graph (and eager with TIMELINE_EAGER=1)
# against our torch loop in reduce-overhead, for the models in TIMELINE_MODELS (default gpt2-small,nanogpt).
# Writes OUT/machine.txt, OUT/timeline.tgz (traces gzipped, logs, gap JSON), OUT/table.txt; prints the table.
#   usage: bash scripts/timeline_call.sh [OUT]
set -u -o pipefail
OUT=${1:-${OUT:-$PWD/timeline-out}}
W=$(mktemp -d)/timeline
mkdir -p "$W" "$OUT"
source scripts/device_env.sh || exit 1
export TR2_KERNEL_CACHE="$PWD/.cache/kernels"
machine_record "$OUT/machine.txt"
runs=()
for m in ${TIMELINE_MODELS:-gpt2-small nanogpt}; do
  runs+=("$m cupy-graph --side cupy --half-roundings --cuda-graph")
  [ "${TIMELINE_EAGER:-0}" = 1 ] && runs+=("$m cupy-eager --side cupy --half-roundings")
  runs+=("$m torch-ro --side torch --mode reduce-overhead")
done
for r in "${runs[@]}"; do
  set -- $r; model=$1; name=$model-$2; shift 2
  timeout "${TIMELINE_RUN_S:-150}" python3 -m tr2.profile_run --window 100 130 --trace --out "$W/$name" "$@" \
    --model "$model" --dtype bfloat16 --device cuda --steps 130 >"$W/$name.log" 2>&1
  echo "== $name (exit $?)" >>"$W/table.txt"
  python3 scripts/timeline.py "$W/$name/trace.json" 30 --json "$W/$name/gaps.json" >>"$W/table.txt" 2>&1
  gzip -f "$W/$name/trace.json" 2>/dev/null
  (cd "$(dirname "$W")" && tar czf "$OUT/timeline.tgz" timeline)
done
cp "$W/table.txt" "$OUT/table.txt"
cat "$OUT/table.txt"
