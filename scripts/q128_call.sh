#!/usr/bin/env bash
# One device call on the fifty-eighth session's dK/dV form (docs/perf.md): the resident TMA dK/dV with 128-query tiles
# (TR2_ATTN_DKDV_Q128=1) against the default's 64, and the step of the forward's forms 10 and 11 and the deep dK/dV
# ring that the fifty-seventh session left unmeasured.
# In order of need, each stage started only with the time it takes left (Q128_LIMIT, default 590 s, for the call):
#   1. the kernel cases of the 128-query form (tests/test_kernels_gpu.py -k dkdv_q128, under Q128_TESTS_S, default 120)
#   2. scripts/attention_backward_variants.py: the backward alone, tmarr / tmarrqf / tmarq / tmarqqf on the three
#      models, 3 rounds of 20 graph-timed calls (their bits against each other first)
#   3. scripts/side_call.sh's bench: the step (graph) of the variants in .cache/variants (base; q: 128-query tiles;
#      d: form 10; n: form 11; k: the deep dK/dV ring), Q128_ROUNDS rounds (default 3) of Q128_SELECT (default
#      gpt2-small and gpt2-medium bf16), Q128_AFTER_BENCH_S (default 100) kept for 4; the variant q only where 1 passed
#   4. graph = eager (tests/test_graph_gpu.py -k dkdv_128_query_tiles): whole runs with the form against the default's
#      losses, gpt2-small and the char model
#   usage: TR2_GIT_COMMIT=<40 hex> [Q128_LIMIT=590] bash scripts/q128_call.sh OUT
# Carry data, .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT, .cache/variants (VARIANTS="base=tree
# d=tree:TR2_ATTN_FWD_TMA_LONG=10 n=tree:TR2_ATTN_FWD_TMA_LONG=11 k=tree:TR2_ATTN_DKDV_DEEP=1
# q=tree:TR2_ATTN_DKDV_Q128=1").
set -u -o pipefail
OUT=${1:?OUT}
LIMIT=${Q128_LIMIT:-590}
mkdir -p "$OUT"
source scripts/device_env.sh || exit 1
call_begin "$OUT" "$LIMIT"
timeout "${Q128_TESTS_S:-120}" python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py -k dkdv_q128 \
  >"$OUT/tests.log" 2>&1
TESTS_RC=$?
echo "== kernel tests (exit $TESTS_RC, $(elapsed) s)"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head; tail -1 "$OUT/tests.log"
TR2_BWD_FORMS=tmarr,tmarrqf,tmarq,tmarqqf timeout 150 python3 scripts/attention_backward_variants.py "$OUT/bwd.jsonl" 3 20 \
  >"$OUT/bwd.log" 2>&1
echo "== backward alone (exit $?, $(elapsed) s)"; grep -v Warn "$OUT/bwd.log" | grep -v "_warn_once" | tail -24
VARIANTS_RUN="base d n k"
[ "$TESTS_RC" = 0 ] && VARIANTS_RUN="base q d n k"
L=$(( $(left) - ${Q128_AFTER_BENCH_S:-100} ))
[ "$L" -gt 100 ] && SIDE_CALL_S=$L SIDE_STAGES=bench \
  SIDE_LIBS=$(for v in $VARIANTS_RUN; do printf '%s=.cache/variants/%s/lib,' "$v" "$v"; done | sed 's/,$//') \
  SIDE_SELECT=${Q128_SELECT:-gpt2-small/bfloat16,gpt2-medium/bfloat16} SIDE_ROUNDS=${Q128_ROUNDS:-3} SIDE_TORCH= \
  bash scripts/side_call.sh "$OUT/side"
echo "== bench done ($(elapsed) s)"
if [ "$TESTS_RC" = 0 ] && [ "$(left)" -gt 80 ]; then
  timeout $(( $(left) - 20 )) python3 -m pytest -q -p no:cacheprovider -rfE tests/test_graph_gpu.py \
    -k "dkdv_128_query_tiles" >"$OUT/graph.log" 2>&1
  echo "== graph = eager (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/graph.log" | tail -3
fi
echo "== done ($(elapsed) s)"
out_fold "$OUT"
