#!/usr/bin/env bash
# One device call for scripts/probes/attention_forward_alone_probe.py (docs/perf.md, fifty-fifth session): the probe's
# table (both forwards alone, L2 warm and cold, by torch.profiler), then Nsight Compute on both sides' attention kernels
# on gpt2-small bf16 (side_call.sh's ncu stage: the pipes, the issue rate, the SMs' active cycles against the elapsed
# ones). Call 1 of results/h100-perf-20261206k ran it at 41b0de6, with a loop of its own for Nsight Compute.
#   usage: TR2_GIT_COMMIT=<40 hex> bash scripts/probes/attention_forward_alone_call.sh OUT [MODELS]
set -u -o pipefail
OUT=${1:?OUT} MODELS=${2:-nanogpt,gpt2-small,gpt2-medium}
source scripts/device_env.sh || exit 1
call_begin "$OUT" 420
timeout 200 python3 scripts/probes/attention_forward_alone_probe.py "$OUT/alone.jsonl" 30 "$MODELS" >"$OUT/alone.log" 2>&1
echo "== probe exit $? ($(elapsed) s)"
cat "$OUT/alone.log"
# both forwards under Nsight Compute: side_call.sh's ncu stage (ours by attention_ncu.py, cuDNN's by sdpa_ncu.py)
SIDE_CALL_S=$(left) SIDE_STAGES=ncu SIDE_NCU="gpt2-small:bfloat16:1 gpt2-small:bfloat16:1:cudnn" \
  bash scripts/side_call.sh "$OUT/ncu"
out_fold "$OUT"
