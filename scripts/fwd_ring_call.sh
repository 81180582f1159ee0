#!/usr/bin/env bash
# One device call on the forms the fifty-fifth session built (docs/perf.md): the half-type forward's form 10 (four
# stages of k and v) and form 11 (a kernel for rows without dropout) against form 7, and the resident TMA dK/dV with
# four stages of q and dO (TR2_ATTN_DKDV_DEEP=1) against two.
# In order of need, each stage started only with the time it takes left (FWD_RING_LIMIT, default 590 s, for the call):
#   1. scripts/probes/attention_forward_alone_probe.py with forms 7, 10 and 11 and cuDNN's, L2 warm and cold
#   2. the kernel cases of the three and form 7's (tests/test_kernels_gpu.py; FWD_RING_TESTS, default
#      "form_keeps_form7s_bits or dkdv_deep_ring or tma_wide", under FWD_RING_TESTS_S, default 150)
#   3. scripts/side_call.sh's bench: the step (graph) of the variants in .cache/variants (base; d: form 10; n: form 11;
#      k: the deep dK/dV ring; dk: forms 10 and k), FWD_RING_ROUNDS rounds (default 1) of FWD_RING_SELECT (default
#      gpt2-small and gpt2-medium bf16), FWD_RING_AFTER_BENCH_S (default 150) kept for 4 and 5
#   4. graph = eager (tests/test_graph_gpu.py): forms 7, 10, 11 (wide_tma_forward) and the deep dK/dV ring against
#      the default's losses (deep_dkdv_ring)
#   5. scripts/switch_ab_call.sh without tests: whole 12-step gpt2-small bf16 graph runs with form 7 and form 10, byte
#      for byte, then each form under Nsight Compute on gpt2-small bf16 (attention_ncu.py; ncu flushes the caches)
#   usage: TR2_GIT_COMMIT=<40 hex> [FWD_RING_LIMIT=590] bash scripts/fwd_ring_call.sh OUT
# Carry data, .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT, .cache/variants (VARIANTS="base=tree
# d=tree:TR2_ATTN_FWD_TMA_LONG=10 n=tree:TR2_ATTN_FWD_TMA_LONG=11 k=tree:TR2_ATTN_DKDV_DEEP=1
# dk=tree:TR2_ATTN_FWD_TMA_LONG=10,TR2_ATTN_DKDV_DEEP=1").
set -u -o pipefail
OUT=${1:?OUT}
LIMIT=${FWD_RING_LIMIT:-590}
mkdir -p "$OUT"
source scripts/device_env.sh || exit 1
call_begin "$OUT" "$LIMIT"
TR2_PROBE_FORMS=7,10,11 timeout 100 python3 scripts/probes/attention_forward_alone_probe.py "$OUT/alone.jsonl" 30 \
  gpt2-small,gpt2-medium >"$OUT/alone.log" 2>&1
echo "== probe (exit $?, $(elapsed) s)"; grep -v Warn "$OUT/alone.log" | grep -v "_warn_once" | tail -18
TESTS=${FWD_RING_TESTS:-form_keeps_form7s_bits or dkdv_deep_ring or tma_wide}
timeout "${FWD_RING_TESTS_S:-150}" python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py -k "$TESTS" \
  >"$OUT/tests.log" 2>&1
echo "== kernel tests (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head; tail -1 "$OUT/tests.log"
L=$(( $(left) - ${FWD_RING_AFTER_BENCH_S:-150} ))
[ "$L" -gt 100 ] && SIDE_CALL_S=$L SIDE_STAGES=bench \
  SIDE_LIBS=$(for v in base d n k dk; do printf '%s=.cache/variants/%s/lib,' "$v" "$v"; done | sed 's/,$//') \
  SIDE_SELECT=${FWD_RING_SELECT:-gpt2-small/bfloat16,gpt2-medium/bfloat16} SIDE_ROUNDS=${FWD_RING_ROUNDS:-1} SIDE_TORCH= \
  bash scripts/side_call.sh "$OUT/side"
echo "== bench done ($(elapsed) s)"
if [ "$(left)" -gt 100 ]; then
  timeout $(( $(left) - 60 )) python3 -m pytest -q -p no:cacheprovider -rfE tests/test_graph_gpu.py \
    -k "wide_tma_forward or deep_dkdv_ring" >"$OUT/graph.log" 2>&1
  echo "== graph = eager (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/graph.log" | tail -3
fi
if [ "$(left)" -gt 70 ]; then
  AB_SWITCH=TR2_ATTN_FWD_TMA_LONG AB_OFF=7 AB_ON=10 AB_TESTS= AB_KERNEL="attn_forward_tmawr" \
    AB_NCU="gpt2-small:bfloat16:1" AB_ROUNDS=1 AB_BITS="gpt2-small:bfloat16:12" AB_CALL_S=$(( $(left) - 5 )) \
    bash scripts/switch_ab_call.sh "$OUT/ab"
fi
echo "== done ($(elapsed) s)"
out_fold "$OUT"
