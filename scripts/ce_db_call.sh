#!/usr/bin/env bash
# One GPU call for a form of the loss's shared-memory rows (cross_entropy.cu): the gradient pass by exp2
# (cross_entropy_forward_backward_smem_ex2, TR2_CE_GRAD_EX2; docs/perf.md, "Thirtieth session", call 6; on by default
# since, so the variant ceex2 equals this tree: carry it as VARIANTS="ceex2=tree:TR2_CE_GRAD_EX2=0" to time the expf
# kernel against the default, and read the ratio the other way round):
#   1. the kernel tests (tests/test_kernels_gpu.py -k "grad_ex2 or shared_memory_rows": the loss's bits, dlogits within
#      an ulp of the expf kernel's; the one-row kernel's own checks beside), under their own limit
#   2. the microbenchmark (scripts/ce_bench.py): 8192 x 50304 logits, bf16 and f16, the promise first, then µs a launch
#      in graphs, forms alternating over rounds
#   3. Nsight Compute (--clock-control none) on one launch of each form (bf16): time, DRAM throughput and bytes, issue
#      slots busy, achieved occupancy
#   4. where 1 passed and the form took at most CE_GATE (0.95) of the one-row kernel's time in bf16: the step beside
#      PyTorch's reduce-overhead (side_call.sh's bench: the variant ceex2 against this tree), gpt2-small and
#      gpt2-medium bf16
# (Written for the double-buffered rows, cross_entropy_forward_backward_smem2, TR2_CE_SMEM_DB, its first form and its
# name's: measured x1.335 slower in the thirtieth session and removed, with its CE_FORM=double.)
# Carry (prepared on the CPU machine at the commit to run, before `scripts/device_tree.sh slim`):
#   VARIANTS="ceex2=tree:TR2_CE_GRAD_EX2=0" RECORD=results/h200-perf-20261202d/call4-0ad6d96/record \
#     PATH=$PWD/.venv/bin:$PATH TR2_NVRTC=<libnvrtc.so.12> bash scripts/carry_prepare.sh
#   run tool carry: ["data", ".cache/kernels.tar.xz", ".cache/products", ".cache/nanoGPT", ".cache/variants"]
#   usage: TR2_GIT_COMMIT=<40 hex> bash scripts/ce_db_call.sh "$OUT"   (CE_CALL_S, default 500: the call's seconds;
#   CE_TORCH the torch modes beside the step bench, default reduce-overhead, empty for none)
set -u -o pipefail
OUT=${1:?OUT}
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${CE_CALL_S:-500}"
FORM=${CE_FORM:-ex2}
case "$FORM" in
  ex2) TESTS="grad_ex2 or shared_memory_rows" VARIANT=ceex2 ;;
  *) echo "ce_db_call: CE_FORM '$FORM': ex2 (double went with the double-buffered rows)" >&2; exit 2 ;;
esac
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py -k "$TESTS" >"$OUT/pytest_ce.log" 2>&1
tests=$?
echo "== cross-entropy kernel tests (exit $tests, $(elapsed) s)"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_ce.log" | head; tail -2 "$OUT/pytest_ce.log"
timeout 120 python3 scripts/ce_bench.py "$OUT/ce_bench.jsonl" 3 20 bfloat16,float16 "$FORM" >"$OUT/ce_bench.log" 2>&1
echo "== $FORM against one-row (exit $?, $(elapsed) s)"; tail -2 "$OUT/ce_bench.log"
if [ "$(left)" -gt 150 ]; then
  TR2_VARIANT_TIMING=eager timeout 100 ncu --clock-control none -k regex:^cross_entropy_forward_backward_smem \
    --launch-count 2 \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,sm__inst_issued.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size \
    python3 scripts/ce_bench.py "$W/ncu_bench.jsonl" 1 1 bfloat16 "$FORM" >"$OUT/ncu-ce.txt" 2>&1
  echo "== ncu, bf16 (exit $?, $(elapsed) s)"
  grep -E "^  cross_entropy|gpu__time|dram__|inst_issued|warps_active|registers|grid_size" "$OUT/ncu-ce.txt" | head -24
fi
ratio=$(python3 -c "import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
r = [x for x in r if x['dtype'] == 'bfloat16' and x.get('promise_kept', x['bits_equal'])]
print('%.4f' % (r[0][sys.argv[2] + '_us'] / r[0]['one-row_us']) if r else '')" "$OUT/ce_bench.jsonl" "$FORM" 2>/dev/null)
echo "== bf16 $FORM / one-row: ${ratio:-none} (gate ${CE_GATE:-0.95})"
if [ "$tests" -eq 0 ] && [ -n "$ratio" ] && awk -v r="$ratio" -v g="${CE_GATE:-0.95}" 'BEGIN{exit !(r <= g)}'; then
  SIDE_CALL_S=$(( $(left) - ${CE_AFTER_S:-15} )) SIDE_STAGES=bench SIDE_LIBS=$VARIANT=.cache/variants/$VARIANT/lib \
    SIDE_TORCH=${CE_TORCH-reduce-overhead} SIDE_SELECT=${CE_SELECT:-gpt2-small/bfloat16,gpt2-medium/bfloat16} \
    SIDE_ROUNDS=${CE_ROUNDS:-2} bash scripts/side_call.sh "$OUT/side"
else
  echo "== step bench skipped (tests exit $tests, ratio ${ratio:-none})"
fi
echo "== done ($(elapsed) s)"
out_fold "$OUT"
