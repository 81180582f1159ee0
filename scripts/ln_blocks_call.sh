#!/usr/bin/env bash
# One GPU call for the three-block LayerNorm backward (TR2_LN_BWD_BLOCKS=3, docs/perf.md "Twenty-fifth session"):
#   1. its kernel test (the prefetching and three-block forms against the plain kernel's bits, 90 cases)
#   2. Nsight Compute on residual + LayerNorm at gpt2-small's and gpt2-medium's shapes, three-block form
#   3. the step beside PyTorch's reduce-overhead (scripts/side_call.sh's bench, the o3 variant against the default),
#      only where 1 passed and the c768 backward took under LN_GATE_US (32 µs: the prediction's "wrong if")
#   4. with what is left, Nsight Compute's source view (scripts/source_view.sh) of the gpt2-small attention forward
#      (ours, then cuDNN's fprop): executed instructions per SASS line, to see which of its instructions run in its loop
#      (as run in call 1 of results/h200-perf-20261204b, these steps were written out inline; the same ncu commands)
# Carry data, .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT, .cache/variants (o3 = TR2_LN_BWD_BLOCKS=3).
#   usage: bash scripts/ln_blocks_call.sh OUT     (LN_CALL_S, default 580: the call's seconds)
set -u -o pipefail
OUT=${1:?OUT}
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${LN_CALL_S:-580}"
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py -k backward_forms_are_the_same_bits \
  >"$OUT/pytest_ln.log" 2>&1
tests=$?
echo "== LayerNorm backward forms' tests (exit $tests, $(elapsed) s)"; tail -2 "$OUT/pytest_ln.log"
for m in gpt2-small gpt2-medium; do
  TR2_LN_BWD_BLOCKS=3 timeout 60 ncu --clock-control none -k regex:residual_layernorm --launch-skip 3 --launch-count 3 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    python3 scripts/layernorm_ncu.py $m >"$OUT/ncu-ln-$m-o3.txt" 2>&1
  echo "== ncu $m o3 (exit $?, $(elapsed) s)"
  grep -E "^  residual|Duration  |Achieved Occ|Registers Per" "$OUT/ncu-ln-$m-o3.txt"
done
# the c768 backward's duration in µs (ncu prints it in us or ms)
c768=$(awk '/^  residual_layernorm_backward_c768/{k=1} k && /Duration/{print ($2=="ms") ? $3*1000 : $3; exit}' \
  "$OUT/ncu-ln-gpt2-small-o3.txt")
echo "== c768 three-block backward: ${c768:-none} us (gate ${LN_GATE_US:-32})"
if [ "$tests" -eq 0 ] && [ -n "$c768" ] && awk -v d="$c768" -v g="${LN_GATE_US:-32}" 'BEGIN{exit !(d < g)}'; then
  SIDE_CALL_S=$(( $(left) - ${LN_AFTER_S:-90} )) SIDE_STAGES=bench SIDE_LIBS=o3=.cache/variants/o3/lib \
    SIDE_TORCH=reduce-overhead SIDE_SELECT=${LN_SELECT:-gpt2-small/bfloat16,gpt2-medium/bfloat16} \
    SIDE_ROUNDS=${LN_ROUNDS:-2} bash scripts/side_call.sh "$OUT/side"
else
  echo "== bench skipped (tests exit $tests, c768 ${c768:-none} us)"
fi
[ "$(left)" -gt 50 ] && bash scripts/source_view.sh "$OUT" attnfwd attn_forward 1 $(( $(left) - 30 < 60 ? $(left) - 30 : 60 )) \
  -- python3 scripts/attention_ncu.py gpt2-small bfloat16 1
[ "$(left)" -gt 40 ] && bash scripts/source_view.sh "$OUT" cudnnfwd fprop 1 $(( $(left) - 20 < 60 ? $(left) - 20 : 60 )) \
  -- python3 scripts/sdpa_ncu.py gpt2-small bfloat16
echo "== done ($(elapsed) s)"
out_fold "$OUT"
