#!/usr/bin/env bash
# One GPU call for the bulk-fed LayerNorm backward (TR2_LN_BWD_BULK=1, docs/perf.md "Twenty-seventh session"):
#   1. its kernel test (residual_layernorm_backward_c<C>_bulk against the plain kernel's bits, poisoned outputs,
#      96 cases), first, under its own limit (a hang of the ring's barriers stops only it)
#   2. Nsight Compute on residual + LayerNorm at gpt2-small's and gpt2-medium's shapes (LN_MODELS), plain and bulk
#   3. the step beside PyTorch's reduce-overhead (scripts/side_call.sh's bench, the variant `bulk` against the
#      default), only where 1 passed and the c768 bulk backward took under LN_GATE_US (31 µs: the prediction's
#      "wrong if")
# Carry data, .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT, .cache/variants (bulk = TR2_LN_BWD_BULK=1).
#   usage: TR2_GIT_COMMIT=<commit> bash scripts/ln_bulk_call.sh OUT     (LN_CALL_S, default 560: the call's seconds)
# (calls 3-4 of results/h200-perf-20261204c ran it with nanogpt in both lists, before BULK_SIZES left 384 out)
set -u -o pipefail
OUT=${1:?OUT}
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${LN_CALL_S:-560}"
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py -k backward_bulk_is_the_same_bits \
  >"$OUT/pytest_bulk.log" 2>&1
tests=$?
echo "== bulk backward's tests (exit $tests, $(elapsed) s)"; tail -3 "$OUT/pytest_bulk.log"
for m in ${LN_MODELS:-gpt2-small gpt2-medium}; do
  for form in plain bulk; do
    TR2_LN_BWD_BULK=$([ $form = bulk ] && echo 1 || echo 0) timeout 60 ncu --clock-control none \
      -k regex:residual_layernorm --launch-skip 3 --launch-count 3 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis \
      python3 scripts/layernorm_ncu.py $m >"$OUT/ncu-ln-$m-$form.txt" 2>&1
    echo "== ncu $m $form (exit $?, $(elapsed) s)"
    grep -E "^  residual|Duration  |DRAM Throughput|Registers Per|Dynamic Shared" "$OUT/ncu-ln-$m-$form.txt"
  done
done
# the c768 bulk backward's duration in µs (ncu prints it in us or ms)
c768=$(awk '/^  residual_layernorm_backward_c768_bulk/{k=1} k && /Duration/{print ($2=="ms") ? $3*1000 : $3; exit}' \
  "$OUT/ncu-ln-gpt2-small-bulk.txt")
echo "== c768 bulk backward: ${c768:-none} us (gate ${LN_GATE_US:-31})"
if [ "$tests" -eq 0 ] && [ -n "$c768" ] && awk -v d="$c768" -v g="${LN_GATE_US:-31}" 'BEGIN{exit !(d < g)}'; then
  SIDE_CALL_S=$(( $(left) - ${LN_AFTER_S:-20} )) SIDE_STAGES=bench SIDE_LIBS=bulk=.cache/variants/bulk/lib \
    SIDE_TORCH=reduce-overhead SIDE_SELECT=${LN_SELECT:-gpt2-small/bfloat16,gpt2-medium/bfloat16} \
    SIDE_ROUNDS=${LN_ROUNDS:-2} bash scripts/side_call.sh "$OUT/side"
else
  echo "== bench skipped (tests exit $tests, c768 ${c768:-none} us)"
fi
echo "== done ($(elapsed) s)"
out_fold "$OUT"
