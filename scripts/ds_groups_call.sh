#!/usr/bin/env bash
# One GPU call for the attention backward a group of batches at a time (TR2_ATTN_DS_GROUP_BATCHES, docs/perf.md
# "Twenty-eighth session"; written after that session's device time, NOT yet run):
#   1. its kernel cases (tests/test_kernels_gpu.py, in_groups_of_batches: the whole launch's bits in groups of 1 and 2
#      batches, outputs poisoned, the launches counted), under their own limit
#   2. the whole-run graph tests (tests/test_graph_gpu.py, groups_of_batches: gpt2-small with dropout 0.2, bf16 in
#      groups of 2 and fp16 in groups of 1, the losses of the run in one group to the bit, eager and graph)
#   3. the backward alone (scripts/attention_backward_variants.py): tmarrqf (the default) against tmarrqfg1, g2, g4,
#      where 1 passed
#   4. Nsight Compute with the caches left as the program leaves them (--cache-control none: whether the dQ finds
#      its group's dS^T in the L2 is the point), on every dK/dV and dQ launch of gpt2-small's second pass, groups of
#      0 (all at once) and 2 batches: time, DRAM bytes read and written, L2 hit rate
#   5. the step beside PyTorch's reduce-overhead (side_call.sh's bench: the variants g1 and g2 against the default),
#      where 1 and 2 passed and a grouped form's backward alone on gpt2-small was at most DS_GATE (0.99) times
#      tmarrqf's
# Carry data, .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT, .cache/variants (prepared with
#   VARIANTS="g1=tree:TR2_ATTN_DS_GROUP_BATCHES=1 g2=tree:TR2_ATTN_DS_GROUP_BATCHES=2" bash scripts/carry_prepare.sh).
#   usage: TR2_GIT_COMMIT=<40 hex> bash scripts/ds_groups_call.sh OUT     (DS_CALL_S, default 560: the call's seconds)
set -u -o pipefail
OUT=${1:?OUT}
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${DS_CALL_S:-560}"
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py -k in_groups_of_batches \
  >"$OUT/pytest_groups.log" 2>&1
tests=$?
echo "== groups' kernel cases (exit $tests, $(elapsed) s)"; tail -2 "$OUT/pytest_groups.log"
timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE -s tests/test_graph_gpu.py -k groups_of_batches \
  >"$OUT/pytest_graph.log" 2>&1
graph=$?
echo "== groups' whole runs, eager and graph (exit $graph, $(elapsed) s)"; grep -E "max rel|passed|failed" "$OUT/pytest_graph.log" | tail -4
if [ "$tests" -eq 0 ]; then
  TR2_BWD_FORMS=tmarrqf,tmarrqfg1,tmarrqfg2,tmarrqfg4 timeout 180 python3 scripts/attention_backward_variants.py \
    "$OUT/bwd.jsonl" 3 20 >"$OUT/bwd.log" 2>&1
  echo "== backward forms (exit $?, $(elapsed) s)"; grep -E "bits|  tmarrq" "$OUT/bwd.log" | tail -16
fi
# gpt2-small's second pass: the groups' dK/dV and dQ launches (2 a group) after the first pass's
for g in 0 2; do
  [ "$(left)" -gt 60 ] || break
  n=$(( g == 0 ? 2 : 2 * 8 / g ))
  TR2_ATTN_DS_GROUP_BATCHES=$g timeout 90 ncu --clock-control none --cache-control none -k regex:attn_backward_d \
    --launch-skip "$n" --launch-count "$n" \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
    python3 scripts/attention_ncu.py gpt2-small bfloat16 1 >"$OUT/ncu-groups-$g.txt" 2>&1
  echo "== ncu, groups of $g batches (exit $?, $(elapsed) s)"
  grep -E "^  attn_|gpu__time_duration|dram__bytes|lts__t_sector_hit|passes" "$OUT/ncu-groups-$g.txt" | head -40
done
# the gate: the best grouped form's median on gpt2-small against tmarrqf's (the table's lines: model form ms ...)
ratio=$(awk '$1 == "gpt2-small" && $4 == "ms" {t[$2] = $3 + 0}
  END {b = 0; for (f in t) if (f ~ /^tmarrqfg/ && (b == 0 || t[f] < b)) b = t[f];
       if (b > 0 && t["tmarrqf"] > 0) printf "%.4f", b / t["tmarrqf"]}' "$OUT/bwd.log" 2>/dev/null)
echo "== best grouped form / tmarrqf on gpt2-small: ${ratio:-none} (gate ${DS_GATE:-0.99})"
if [ "$tests" -eq 0 ] && [ "$graph" -eq 0 ] && [ -n "$ratio" ] && awk -v r="$ratio" -v g="${DS_GATE:-0.99}" 'BEGIN{exit !(r <= g)}'; then
  SIDE_CALL_S=$(( $(left) - ${DS_AFTER_S:-20} )) SIDE_STAGES=bench \
    SIDE_LIBS=g1=.cache/variants/g1/lib,g2=.cache/variants/g2/lib SIDE_TORCH=reduce-overhead \
    SIDE_SELECT=${DS_SELECT:-gpt2-small/bfloat16,gpt2-medium/bfloat16} SIDE_ROUNDS=${DS_ROUNDS:-2} \
    bash scripts/side_call.sh "$OUT/side"
else
  echo "== bench skipped (tests exit $tests, graph exit $graph, ratio ${ratio:-none})"
fi
echo "== done ($(elapsed) s)"
out_fold "$OUT"
