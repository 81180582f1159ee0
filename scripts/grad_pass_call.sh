#!/usr/bin/env bash
# One GPU call for the wide gradient passes (kernels/global_norm.cu's and cast.cu's _wide kernels, TR2_GLOBAL_NORM_WIDE
# and TR2_CAST_WIDE, on by default; docs/perf.md "Thirty-first session"):
#   1. their kernel tests (the same bits as the one-load-a-turn kernels, three runs, the casts on every half code), the
#      norm's and the casts' older tests beside them
#   2. scripts/probes/grad_pass_bench.py: the bits on gpt2-small's and gpt2-medium's gradients, then the µs a call
#   3. tests/test_graph_gpu.py -k replays_train: graph = eager to the bit with them
#   4. the step (graph, steps 100-400, no torch): this tree against the variant `loop` (both switches 0), GP_SELECT
#      (default gpt2-small in bf16 and f16), GP_ROUNDS rounds (default 2), the order rotating
# Carry: VARIANTS="loop=tree:TR2_GLOBAL_NORM_WIDE=0,TR2_CAST_WIDE=0" RECORD=<the products record> \
#          TR2_NVRTC=<libnvrtc.so.12> bash scripts/carry_prepare.sh; then scripts/device_tree.sh slim
#   run tool carry: ["data", ".cache/kernels.tar.xz", ".cache/products", ".cache/nanoGPT", ".cache/variants"]
#   usage: TR2_GIT_COMMIT=<40 hex> bash scripts/grad_pass_call.sh "$OUT"   (GP_CALL_S, default 560: the call's seconds)
set -u -o pipefail
OUT=${1:?OUT}
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${GP_CALL_S:-560}"
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py \
  -k "wide_forms or widening_cast_wide or global_norm or casts_round or half_type_gradients or bf16_cast" \
  >"$OUT/pytest_kernels.log" 2>&1
echo "== kernel tests (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_kernels.log" | head; tail -1 "$OUT/pytest_kernels.log"
PYTHONPATH=lib:scripts timeout 120 python3 scripts/probes/grad_pass_bench.py "$OUT/grad_pass.jsonl" 3 20 \
  >"$OUT/grad_pass.log" 2>&1
echo "== grad_pass_bench (exit $?, $(elapsed) s)"; cat "$OUT/grad_pass.log" | tail -6
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_graph_gpu.py -k replays_train \
  >"$OUT/pytest_graph.log" 2>&1
echo "== replays_train (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_graph.log" | head; tail -1 "$OUT/pytest_graph.log"
if [ "$(left)" -gt 90 ]; then
  SIDE_CALL_S=$(( $(left) - 10 )) SIDE_STAGES=bench SIDE_LIBS=loop=.cache/variants/loop/lib SIDE_TORCH= \
    SIDE_SELECT=${GP_SELECT:-gpt2-small/bfloat16,gpt2-small/float16} SIDE_ROUNDS=${GP_ROUNDS:-2} \
    bash scripts/side_call.sh "$OUT/side"
else
  echo "== the step skipped: $(left) s left"
fi
echo "== done ($(elapsed) s)"
