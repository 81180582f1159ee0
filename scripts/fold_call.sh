#!/usr/bin/env bash
# One GPU call for dQ folded into the TMA dK/dV kernel by ordered reductions (TR2_ATTN_DKDV_TMA_FORM=6,
# attention.cu's attention_backward_dkdv_tma_fold; docs/perf.md "Thirty-third session"; written without a device,
# NOT yet run):
#   1. its kernel cases (tests/test_kernels_gpu.py, dkdv_fold: dq, dk, dv against the NumPy form, poisoned, three runs
#      alike, the distance from the plain TMA form recorded), under their own limit
#   2. the whole-run graph tests (tests/test_graph_gpu.py, folded_dq: gpt2-small and the char model in bf16 with
#      dropout 0.2, graph = eager to the bit, the losses beside the default's printed)
#   3. the backward alone (scripts/attention_backward_variants.py): tmarrqf (the default) against tmaf
#   4. Nsight Compute of gpt2-small's second backward, both forms: time, DRAM bytes read and written
#   5. the step beside PyTorch's reduce-overhead (side_call.sh's bench: the variant fold against the default), where 1
#      and 2 passed and tmaf's backward alone on gpt2-small was at most FOLD_GATE (0.97) times tmarrqf's
# Carry data, .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT, .cache/variants (prepared with
#   VARIANTS="fold=tree:TR2_ATTN_DKDV_TMA_FORM=6" bash scripts/carry_prepare.sh).
#   usage: TR2_GIT_COMMIT=<40 hex> bash scripts/fold_call.sh OUT     (FOLD_CALL_S, default 560: the call's seconds)
set -u -o pipefail
OUT=${1:?OUT}
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${FOLD_CALL_S:-560}"
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py -k dkdv_fold \
  >"$OUT/pytest_fold.log" 2>&1
tests=$?
echo "== the fold's kernel cases (exit $tests, $(elapsed) s)"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_fold.log" | head -8
tail -2 "$OUT/pytest_fold.log"
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE -s tests/test_graph_gpu.py -k folded_dq \
  >"$OUT/pytest_graph.log" 2>&1
graph=$?
echo "== the fold's whole runs, eager and graph (exit $graph, $(elapsed) s)"
grep -E "max rel|passed|failed" "$OUT/pytest_graph.log" | tail -4
if [ "$tests" -eq 0 ]; then
  TR2_BWD_FORMS=tmarrqf,tmaf timeout 150 python3 scripts/attention_backward_variants.py "$OUT/bwd.jsonl" 3 20 \
    >"$OUT/bwd.log" 2>&1
  echo "== backward forms (exit $?, $(elapsed) s)"; grep -E "against recompute|  tmarrqf|  tmaf" "$OUT/bwd.log" | tail -12
fi
# gpt2-small's second pass: the default's dK/dV and dQ launches (2), the fold's one
for form in 5 6; do
  [ "$(left)" -gt 60 ] || break
  n=$(( form == 5 ? 2 : 1 ))
  TR2_ATTN_DKDV_TMA_FORM=$form timeout 90 ncu --clock-control none -k regex:attn_backward_d \
    --launch-skip "$n" --launch-count "$n" \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
    python3 scripts/attention_ncu.py gpt2-small bfloat16 1 >"$OUT/ncu-form-$form.txt" 2>&1
  echo "== ncu, form $form (exit $?, $(elapsed) s)"
  grep -E "^  attn_|gpu__time_duration|dram__bytes|lts__t_sector_hit" "$OUT/ncu-form-$form.txt" | head -20
done
ratio=$(awk '$1 == "gpt2-small" && $4 == "ms" {t[$2] = $3 + 0}
  END {if (t["tmaf"] > 0 && t["tmarrqf"] > 0) printf "%.4f", t["tmaf"] / t["tmarrqf"]}' "$OUT/bwd.log" 2>/dev/null)
echo "== tmaf / tmarrqf on gpt2-small: ${ratio:-none} (gate ${FOLD_GATE:-0.97})"
if [ "$tests" -eq 0 ] && [ "$graph" -eq 0 ] && [ -n "$ratio" ] && awk -v r="$ratio" -v g="${FOLD_GATE:-0.97}" 'BEGIN{exit !(r <= g)}'; then
  SIDE_CALL_S=$(( $(left) - ${FOLD_AFTER_S:-20} )) SIDE_STAGES=bench SIDE_LIBS=fold=.cache/variants/fold/lib \
    SIDE_TORCH=reduce-overhead SIDE_SELECT=${FOLD_SELECT:-gpt2-small/bfloat16,gpt2-medium/bfloat16} \
    SIDE_ROUNDS=${FOLD_ROUNDS:-2} bash scripts/side_call.sh "$OUT/side"
else
  echo "== bench skipped (tests exit $tests, graph exit $graph, ratio ${ratio:-none})"
fi
echo "== done ($(elapsed) s)"
out_fold "$OUT"
