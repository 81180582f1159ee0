#!/usr/bin/env bash
# One device call on the fifty-sixth session's form (docs/perf.md): dQ inside the resident TMA dK/dV kernel by ordered
# bulk reductions (TR2_ATTN_DQ_BULK=1, attn_backward_dkdvq_tmarb_: column halves; 2, _tmarbk_: key halves) against
# the default (dK/dV writing ds_t, then the TMA dQ pass). In order of need, each stage started only with the time it
# takes left (BULK_LIMIT, default 590 s):
#   0. scripts/probes/dq_bulk_smoke.py for each split (one backward of gpt2-small's shape with the form beside the
#      default, under BULK_SMOKE_S, default 60, each): the stages below take the splits that passed; where none did,
#      the rest of the call runs scripts/fwd_ring_call.sh instead
#   1. their kernel cases (tests/test_kernels_gpu.py -k dq_bulk and the splits, and BULK_TESTS_K if set: dk and dv the
#      default's bits, dq within the NumPy form's tolerance, three runs alike, poisoned allocations; BULK_TESTS_S,
#      default 150)
#   2. where BULK_BWD_MIN_LEFT seconds (default 200) are left: the backward alone (scripts/attention_backward_variants.py,
#      TR2_BWD_FORMS: tmarrqf, the default's form on long rows, and the passing splits' tmarb / tmarbk; the three models
#      or TR2_BWD_MODELS, graph-timed, BULK_BWD_ROUNDS rounds, default 3; BULK_BWD_EXTRA: more forms, such as the
#      timing-only tmarbu,tmarbz, where split 1 passed)
#   3. the step (graph) of the variants in .cache/variants: base (the tree) and the passing splits' q (split 1) and q2
#      (split 2), BULK_ROUNDS rounds (default 1) of BULK_SELECT (default gpt2-small and gpt2-medium bf16),
#      BULK_AFTER_BENCH_S (default 110) kept for 4
#   4. graph = eager with the passing splits (tests/test_graph_gpu.py -k bulk_dq: gpt2-small and the char model)
#   usage: TR2_GIT_COMMIT=<40 hex> [BULK_LIMIT=590] bash scripts/bulk_call.sh OUT
# Carry data, .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT, .cache/variants (VARIANTS="base=tree
# q=tree:TR2_ATTN_DQ_BULK=1 q2=tree:TR2_ATTN_DQ_BULK=2", and those of scripts/fwd_ring_call.sh for its fallback).
set -u -o pipefail
OUT=${1:?OUT}
LIMIT=${BULK_LIMIT:-590}
mkdir -p "$OUT"
source scripts/device_env.sh || exit 1
call_begin "$OUT" "$LIMIT"
splits=()
for split in 1 2; do
  PYTHONPATH=lib:scripts timeout -k 10 "${BULK_SMOKE_S:-60}" python3 scripts/probes/dq_bulk_smoke.py gpt2-small "$split" \
    >"$OUT/smoke$split.log" 2>&1
  rc=$?
  echo "== smoke, split $split (exit $rc, $(elapsed) s)"; grep -v Warn "$OUT/smoke$split.log" | tail -2
  [ "$rc" -eq 0 ] && splits+=("$split")
done
if [ "${#splits[@]}" -eq 0 ]; then   # the form hangs or computes wrong: the rest of the call on the forward's forms
  echo "== no split passed its smoke run: scripts/fwd_ring_call.sh in the $(left) s left"
  [ "$(left)" -gt 150 ] && FWD_RING_LIMIT=$(( $(left) - 5 )) bash scripts/fwd_ring_call.sh "$OUT/r"
  out_fold "$OUT"
  exit 0
fi
K="dq_bulk and ($(printf 'split%s or ' "${splits[@]}" | sed 's/ or $//'))${BULK_TESTS_K:+ and ($BULK_TESTS_K)}"
PYTHONUNBUFFERED=1 timeout "${BULK_TESTS_S:-150}" python3 -m pytest -v -p no:cacheprovider -rfE tests/test_kernels_gpu.py \
  -k "$K" >"$OUT/tests.log" 2>&1
echo "== kernel tests, -k '$K' (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head; tail -1 "$OUT/tests.log"
forms=tmarrqf variants=base
for split in "${splits[@]}"; do
  forms+=,$([ "$split" = 1 ] && echo tmarb || echo tmarbk)
  variants+=" $([ "$split" = 1 ] && echo q || echo q2)"
done
[[ " ${splits[*]} " == *" 1 "* && -n "${BULK_BWD_EXTRA:-}" ]] && forms+=,$BULK_BWD_EXTRA
if [ "$(left)" -gt "${BULK_BWD_MIN_LEFT:-200}" ]; then
  PYTHONUNBUFFERED=1 TR2_BWD_FORMS=$forms timeout $(( $(left) - 10 < 150 ? $(left) - 10 : 150 )) \
    python3 scripts/attention_backward_variants.py "$OUT/bwd.jsonl" "${BULK_BWD_ROUNDS:-3}" 20 >"$OUT/bwd.log" 2>&1
  echo "== backward alone, $forms (exit $?, $(elapsed) s)"; grep -v Warn "$OUT/bwd.log" | tail -16
fi
L=$(( $(left) - ${BULK_AFTER_BENCH_S:-110} ))
[ "$L" -gt 100 ] && SIDE_CALL_S=$L SIDE_STAGES=bench \
  SIDE_LIBS=$(for v in $variants; do printf '%s=.cache/variants/%s/lib,' "$v" "$v"; done | sed 's/,$//') \
  SIDE_SELECT=${BULK_SELECT:-gpt2-small/bfloat16,gpt2-medium/bfloat16} SIDE_ROUNDS=${BULK_ROUNDS:-1} SIDE_TORCH= \
  bash scripts/side_call.sh "$OUT/side"
echo "== bench done ($(elapsed) s)"
if [ "$(left)" -gt 90 ]; then
  PYTHONUNBUFFERED=1 timeout $(( $(left) - 20 )) python3 -m pytest -q -s -p no:cacheprovider -rfE tests/test_graph_gpu.py \
    -k "bulk_dq and ($(printf 'split%s or ' "${splits[@]}" | sed 's/ or $//'))" >"$OUT/graph.log" 2>&1
  echo "== graph = eager (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)|graph vs eager|passed|failed" "$OUT/graph.log" | tail -6
fi
echo "== done ($(elapsed) s)"
out_fold "$OUT"
