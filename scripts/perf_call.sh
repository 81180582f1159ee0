#!/usr/bin/env bash
# One GPU call that checks a kernel change and measures it against its baseline and PyTorch, for the device
# tool's copy of the repo. Carry: .cache/kernels (cubins built ahead, the baseline's among them), data,
# .cache/nanoGPT (a copy of ../shared/nanoGPT: the tests check for it, scripts/device_env.sh), and
# .cache/baseline (a copy of the baseline commit's lib/, e.g. `git archive main lib params | tar x -C .cache/baseline`).
# Writes under OUT (at most 8 files come back), each part as soon as it is done, so that a call stopped at its
# limit still returns what ran: machine.txt, check.tgz (gpu_check.sh: kernel and graph tests), attention.tgz
# (baseline and new), profile.tgz and bench.tgz (scripts/device_bench.py), table.txt; prints the table last.
#   usage: bash scripts/perf_call.sh [OUT]     budgets: PERF_BENCH_S (default 240), PERF_PROFILE_S (120);
#   PERF_TORCH_MODES: the torch modes the bench runs beside the cupy graph (default reduce-overhead);
#   PERF_ATTENTION=0 skips the attention bench (a call that leaves attention.cu as it was), PERF_TESTS=0 the GPU
#   tests (a call that only times a commit tested in an earlier call), PERF_PROFILE_S=0 the profile;
#   TR2_BENCH_ROUNDS / TR2_BENCH_ROUND0 (scripts/device_bench.py) time each configuration in rotating rounds;
#   PERF_TESTS=others runs only the model-level GPU tests (sides agree, graph = eager loop: a change outside the
#   kernels); PERF_LN=1 adds scripts/ln_variants.py, PERF_NCU="gpt2-small:bfloat16:1 ..." Nsight Compute on the
#   attention kernels of each model:type:half_roundings[:LIB[:N]] (pipe use, stalls, occupancy;
#   LIB: another lib/ first on PYTHONPATH, N: its attention kernels in a forward and backward, default 3); both
#   into extras.tgz
set -u -o pipefail
OUT=${1:-${OUT:-$PWD/perf-call-out}}
W=$(mktemp -d)
source scripts/device_env.sh || exit 1
export TR2_KERNEL_CACHE="$PWD/.cache/kernels"
machine_record "$W/machine.txt"
mkdir -p "$OUT"; cp "$W/machine.txt" "$OUT/"
mkdir -p "$W/extras"
# Pipes of the SM (per cent of peak while active): tensor (mma), XU (MUFU: ex2), FMA, ALU, shared memory; then
# the warps stalled on each reason per issued instruction.
NCU_PIPES=regex:sm__pipe_tensor_op_.*_cycles_active\.avg\.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,\
regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio
pack() {  # pack NAME FILES...: one tarball under OUT, written at once
  local name=$1; shift
  (cd "$W" && tar czf "$OUT/$name.tgz" --exclude='*.npz' "$@" 2>/dev/null)
}
if [ "${PERF_TESTS:-1}" = others ]; then
  mkdir -p "$W/check"
  timeout 300 python3 -m pytest -q -s -p no:cacheprovider -rfE -m gpu tests/test_sides_agree.py \
    tests/test_graph_gpu.py >"$W/check/pytest_others.log" 2>&1
  pack check check
elif [ "${PERF_TESTS:-1}" != 0 ]; then
  TR2_TRAIN_SMOKE=0 bash scripts/gpu_check.sh "$W/check" >"$W/check.log" 2>&1
  pack check check check.log
fi
if [ "${PERF_ATTENTION:-1}" != 0 ] && [ -d .cache/baseline/lib ]; then
  PYTHONPATH="$PWD/.cache/baseline/lib:/tmp/site" timeout 300 python3 scripts/attention_bench.py "$W/attention_baseline.jsonl" 20 \
    >"$W/attention_baseline.log" 2>&1
fi
if [ "${PERF_ATTENTION:-1}" != 0 ]; then
  timeout 300 python3 scripts/attention_bench.py "$W/attention_new.jsonl" 20 >"$W/attention_new.log" 2>&1
  pack attention $(cd "$W" && ls -d attention_* 2>/dev/null)
fi
if [ "${PERF_LN:-0}" = 1 ]; then
  timeout 120 python3 scripts/ln_variants.py "$W/extras/ln.jsonl" >"$W/extras/ln.log" 2>&1
fi
for spec in ${PERF_NCU:-}; do
  IFS=: read -r model dtype hr lib n <<<"$spec"
  tag=$model-$dtype-$hr${lib:+-$(basename "$(dirname "$lib")")}
  PYTHONPATH="${lib:+$PWD/$lib:}$PYTHONPATH" timeout 150 ncu --clock-control none -k regex:attn_ \
    --launch-skip "${n:-3}" --launch-count "${n:-3}" --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section SchedulerStats \
    --section LaunchStats --section InstructionStats --metrics "$NCU_PIPES" \
    python3 scripts/attention_ncu.py "$model" "$dtype" "$hr" >"$W/extras/ncu-$tag.txt" 2>&1
done
[ -n "$(ls -A "$W/extras" 2>/dev/null)" ] && pack extras extras
if [ "${PERF_PROFILE_S:-120}" != 0 ]; then
  TR2_PROFILE_MODELS=gpt2-small timeout $(( ${PERF_PROFILE_S:-120} + 30 )) python3 scripts/device_bench.py "$W/profile" \
    "profile:${PERF_PROFILE_S:-120}" >"$W/profile.log" 2>&1
  pack profile profile profile.log
fi
TR2_BENCH_CUPY=graph TR2_BENCH_TORCH_MODES=${PERF_TORCH_MODES:-reduce-overhead} \
  TR2_BENCH_SELECT=nanogpt/bfloat16,gpt2-small/bfloat16,gpt2-medium/bfloat16 \
  timeout $(( ${PERF_BENCH_S:-240} + 30 )) python3 scripts/device_bench.py "$W/bench" "bench:${PERF_BENCH_S:-240}" \
  >"$W/bench.log" 2>&1
pack bench bench bench.log
{ echo "== tests"; tail -3 "$W/check.log" 2>/dev/null; for f in "$W"/check/pytest*.log; do [ -f "$f" ] && tail -1 "$f"; done
  echo "== attention (baseline)"; tail -6 "$W/attention_baseline.log" 2>/dev/null
  echo "== attention (new)"; tail -6 "$W/attention_new.log" 2>/dev/null
  [ -f "$W/extras/ln.log" ] && { echo "== ln variants"; tail -8 "$W/extras/ln.log"; }
  for f in "$W"/extras/ncu-*.txt; do [ -f "$f" ] && { echo "== $(basename "$f")"; grep -E "attn_|Duration|pct_of_peak|Registers Per|Achieved Occupancy|Issued Warp|No Eligible|Stall" "$f" | head -80; }; done
  echo "== bench"; tail -n 60 "$W/bench.log"; } >"$W/table.txt"
cp "$W/table.txt" "$OUT/table.txt"
cat "$OUT/table.txt"
