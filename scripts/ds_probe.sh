#!/usr/bin/env bash
# One GPU call: the dS-stored attention backward taken apart. The dS-stored kernel tests; each backward kernel
# timed alone (scripts/attention_backward_kernels.py, nanogpt and gpt2-small); Nsight Compute on gpt2-small's
# second-pass forward and backward kernels (memory and warp-state sections).
#   usage: bash scripts/ds_probe.sh OUT     (carry as scripts/ds_call.sh says)
set -u -o pipefail
OUT=${1:-$PWD/ds-probe-out}
W=$(mktemp -d)
mkdir -p "$OUT" "$W/x"
source scripts/device_env.sh || exit 1
use_carried_caches
machine_record "$OUT/machine.txt"
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py -k "ds_stored" >"$W/x/pytest.log" 2>&1
echo "== tests"; tail -2 "$W/x/pytest.log"
timeout 150 python3 scripts/attention_backward_kernels.py "$W/x/kernels.jsonl" 3 10 >"$W/x/kernels.log" 2>&1
echo "== kernels"; cat "$W/x/kernels.log" | tail -20
timeout 150 ncu --clock-control none -k regex:attn_ --launch-skip 4 --launch-count 4 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
  python3 scripts/attention_ncu.py gpt2-small bfloat16 1 >"$W/x/ncu.txt" 2>&1
echo "== ncu"; grep -E "^  attn_|Duration|Memory Throughput|DRAM Throughput|L2 Hit|L1/TEX Hit|Registers Per|Achieved Occupancy|Stall|Compute \(SM\)" "$W/x/ncu.txt" | head -60
(cd "$W" && tar czf "$OUT/probe.tgz" x)
