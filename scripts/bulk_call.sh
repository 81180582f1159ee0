#!/usr/bin/env bash
# One device call on the fifty-sixth session's form (docs/perf.md): dQ inside the resident TMA dK/dV kernel by ordered
# bulk reductions (TR2_ATTN_DQ_BULK=1, attn_backward_dkdvq_tmarb_) against the default (dK/dV writing ds_t, then the
# TMA dQ pass). In order of need, each stage started only with the time it takes left (BULK_LIMIT, default 590 s):
#   0. scripts/probes/dq_bulk_smoke.py (one backward of gpt2-small's shape with the form beside the default, under
#      BULK_SMOKE_S, default 60): where it fails or hangs, the rest of the call runs scripts/fwd_ring_call.sh instead
#   1. its kernel cases (tests/test_kernels_gpu.py -k dq_bulk, or BULK_TESTS_K: dk and dv the default's bits, dq within
#      the NumPy form's tolerance, three runs alike, poisoned allocations; BULK_TESTS_S, default 150); a case that traps
#      (a turn that never came) ends only this stage
#   2. where BULK_BWD_MIN_LEFT seconds (default 200) are left: the backward alone (scripts/attention_backward_variants.py,
#      TR2_BWD_FORMS=tmarrqf,tmarb: the default's form on long rows against the bulk form, the three models or
#      TR2_BWD_MODELS, graph-timed, BULK_BWD_ROUNDS rounds, default 3)
#   3. the step (graph) of the variants in .cache/variants (BULK_VARIANTS, default "base q": base the tree, q
#      TR2_ATTN_DQ_BULK=1), BULK_ROUNDS rounds (default 1) of BULK_SELECT (default gpt2-small and gpt2-medium bf16),
#      BULK_AFTER_BENCH_S (default 110) kept for 4
#   4. graph = eager with the form (tests/test_graph_gpu.py -k bulk_dq: gpt2-small and the char model, 30 steps)
#   usage: TR2_GIT_COMMIT=<40 hex> [BULK_LIMIT=590] bash scripts/bulk_call.sh OUT
# Carry data, .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT, .cache/variants (VARIANTS="base=tree
# q=tree:TR2_ATTN_DQ_BULK=1" and any others BULK_VARIANTS names).
set -u -o pipefail
OUT=${1:?OUT}
LIMIT=${BULK_LIMIT:-590}
mkdir -p "$OUT"
source scripts/device_env.sh || exit 1
call_begin "$OUT" "$LIMIT"
PYTHONPATH=lib:scripts timeout -k 10 "${BULK_SMOKE_S:-60}" python3 scripts/probes/dq_bulk_smoke.py gpt2-small \
  >"$OUT/smoke.log" 2>&1
smoke=$?
echo "== smoke (exit $smoke, $(elapsed) s)"; grep -v Warn "$OUT/smoke.log" | tail -3
if [ "$smoke" -ne 0 ]; then   # the form hangs or computes wrong: the rest of the call on the forward's forms instead
  echo "== the bulk form failed its smoke run: scripts/fwd_ring_call.sh in the $(left) s left"
  [ "$(left)" -gt 150 ] && FWD_RING_LIMIT=$(( $(left) - 5 )) bash scripts/fwd_ring_call.sh "$OUT/r"
  out_fold "$OUT"
  exit 0
fi
PYTHONUNBUFFERED=1 timeout "${BULK_TESTS_S:-150}" python3 -m pytest -v -p no:cacheprovider -rfE tests/test_kernels_gpu.py -k "${BULK_TESTS_K:-dq_bulk}" \
  >"$OUT/tests.log" 2>&1
echo "== kernel tests (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head; tail -1 "$OUT/tests.log"
if [ "$(left)" -gt "${BULK_BWD_MIN_LEFT:-200}" ]; then
  PYTHONUNBUFFERED=1 TR2_BWD_FORMS=tmarrqf,tmarb timeout $(( $(left) - 10 < 150 ? $(left) - 10 : 150 )) \
    python3 scripts/attention_backward_variants.py "$OUT/bwd.jsonl" \
    "${BULK_BWD_ROUNDS:-3}" 20 >"$OUT/bwd.log" 2>&1
  echo "== backward alone (exit $?, $(elapsed) s)"; grep -v Warn "$OUT/bwd.log" | tail -16
fi
L=$(( $(left) - ${BULK_AFTER_BENCH_S:-110} ))
[ "$L" -gt 100 ] && SIDE_CALL_S=$L SIDE_STAGES=bench \
  SIDE_LIBS=$(for v in ${BULK_VARIANTS:-base q}; do printf '%s=.cache/variants/%s/lib,' "$v" "$v"; done | sed 's/,$//') \
  SIDE_SELECT=${BULK_SELECT:-gpt2-small/bfloat16,gpt2-medium/bfloat16} SIDE_ROUNDS=${BULK_ROUNDS:-1} SIDE_TORCH= \
  bash scripts/side_call.sh "$OUT/side"
echo "== bench done ($(elapsed) s)"
if [ "$(left)" -gt 90 ]; then
  PYTHONUNBUFFERED=1 timeout $(( $(left) - 20 )) python3 -m pytest -q -s -p no:cacheprovider -rfE tests/test_graph_gpu.py -k bulk_dq \
    >"$OUT/graph.log" 2>&1
  echo "== graph = eager (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)|graph vs eager|passed|failed" "$OUT/graph.log" | tail -4
fi
echo "== done ($(elapsed) s)"
out_fold "$OUT"
