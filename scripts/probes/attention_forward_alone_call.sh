#!/usr/bin/env bash
# One device call for scripts/probes/attention_forward_alone_probe.py (docs/perf.md, fifty-fifth session): the probe's
# table (both forwards alone, L2 warm and cold, by torch.profiler), then Nsight Compute on one warm launch of each
# kernel on gpt2-small bf16 (the pipes, the issue rate, the SMs' active cycles against the elapsed ones).
#   usage: TR2_GIT_COMMIT=<40 hex> bash scripts/probes/attention_forward_alone_call.sh OUT [MODELS]
set -u -o pipefail
OUT=${1:?OUT} MODELS=${2:-nanogpt,gpt2-small,gpt2-medium}
source scripts/device_env.sh || exit 1
call_begin "$OUT" 300
timeout 200 python3 scripts/probes/attention_forward_alone_probe.py "$OUT/alone.jsonl" 30 "$MODELS" >"$OUT/alone.log" 2>&1
echo "== probe exit $? ($(elapsed) s)"
cat "$OUT/alone.log"
METRICS=gpu__time_duration.sum,sm__cycles_elapsed.avg,sm__cycles_active.avg,smsp__inst_executed.sum,\
smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,\
sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,\
smsp__warps_eligible.avg.per_cycle_active,smsp__warps_active.avg.per_cycle_active,launch__grid_size,launch__block_size,\
launch__registers_per_thread,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio
for k in attn_forward fprop; do
  TR2_PROBE_PLAIN=1 timeout 120 ncu --clock-control none -k "regex:$k" --launch-skip 2 --launch-count 1 --metrics "$METRICS" \
    python3 scripts/probes/attention_forward_alone_probe.py /dev/null 4 gpt2-small >"$OUT/ncu-$k.txt" 2>&1
  echo "== ncu $k exit $? ($(elapsed) s)"
  grep -E "^\s+(attn_|cudnn|[a-z_]+__|launch__)" "$OUT/ncu-$k.txt" | sed 's/  \+/ /g' | cut -c1-160
done
out_fold "$OUT"
