#!/usr/bin/env bash
# One GPU call: scripts/attention_variants.py's timings (carry .cache/variants, built here) and Nsight Compute's
# stall reasons of the folded backward on gpt2-small bf16. Writes OUT/machine.txt, variants.{log,jsonl}, ncu.txt.
set -u -o pipefail
OUT=${1:-${OUT:-$PWD/variants-out}}
mkdir -p "$OUT"
source scripts/device_env.sh || exit 1
export TR2_KERNEL_CACHE="$PWD/.cache/kernels"
machine_record "$OUT/machine.txt"
timeout 200 python3 scripts/attention_variants.py time .cache/variants "$OUT/variants.jsonl" .cache/variants/old.cubin \
  >"$OUT/variants.log" 2>&1
timeout 200 ncu --clock-control none -k regex:attn_backward --launch-skip 1 --launch-count 1 --section SpeedOfLight \
  --section WarpStateStats --section Occupancy --section SchedulerStats --section LaunchStats --section MemoryWorkloadAnalysis \
  python3 scripts/attention_ncu.py gpt2-small bfloat16 1 >"$OUT/ncu.txt" 2>&1
cat "$OUT/variants.log"; grep -E "Duration|Stall|Warp Cycles|Achieved Occupancy|Theoretical Occupancy|Registers|Block Limit|Eligible|Issued Warp|L2 Hit|Memory Throughput|Compute \(SM\)" "$OUT/ncu.txt" | head -40
