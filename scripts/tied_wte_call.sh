#!/usr/bin/env bash
# One GPU call for the tied wte's gradient held as lm_head's half dW plus the embedding's sums (TR2_TIED_WTE, off by
# default; gpu/tensors.py's TiedGradient, embedding.cu's embedding_backward_wte_sums, adamw.cu's adamw_update_tied,
# global_norm.cu's tied rows; docs/perf.md "Thirty-second session"):
#   1. the kernel tests: the tied gradient against the widened one (dense values, the norm's partials in both forms,
#      AdamW's p, m, v and the wte's half copy; three runs), the older norm / AdamW / half-gradient tests beside them
#   2. tests/test_graph_gpu.py: the tied gradient changes no loss, eager and graph (gpt2-small bf16 and f16, the char
#      model), and the graph replays train as before (the switch off)
#   3. scripts/probes/tied_wte_bench.py: the bits of the step's tail (embedding backward, norm, AdamW) both ways on
#      gpt2-small's and gpt2-medium's shapes with a real batch's tokens, then the µs of that tail each way
#   3b. tests/test_nvrtc_gpu.py (issue 9 item 4, written in the thirty-third session): four short training runs with a
#      fresh CuPy cache, each asked to compile nothing at run time and never map libnvrtc (its NVRTC line says what did)
#   4. the step (graph, steps 100-400, no torch): the variant `tied` (TR2_TIED_WTE=1) against this tree (off), TW_SELECT
#      (default gpt2-small and gpt2-medium in bf16, gpt2-small in f16), TW_ROUNDS rounds (default 2), rotating
# Carry: VARIANTS="tied=tree:TR2_TIED_WTE=1" RECORD=<the products record> TR2_NVRTC=<libnvrtc.so.12> \
#          bash scripts/carry_prepare.sh; then scripts/device_tree.sh slim
#   run tool carry: ["data", ".cache/kernels.tar.xz", ".cache/products", ".cache/nanoGPT", ".cache/variants"]
#   usage: TR2_GIT_COMMIT=<40 hex> bash scripts/tied_wte_call.sh "$OUT"   (TW_CALL_S, default 570: the call's seconds)
set -u -o pipefail
OUT=${1:?OUT}
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${TW_CALL_S:-570}"
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py \
  -k "tied_wte or global_norm or half_type_gradients or adamw" >"$OUT/pytest_kernels.log" 2>&1
echo "== kernel tests (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_kernels.log" | head; tail -1 "$OUT/pytest_kernels.log"
timeout 300 python3 -m pytest -q -s -p no:cacheprovider -rfE tests/test_graph_gpu.py -k "tied_wte or replays_train" \
  >"$OUT/pytest_graph.log" 2>&1
echo "== graph tests (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)|max rel" "$OUT/pytest_graph.log" | head; tail -1 "$OUT/pytest_graph.log"
PYTHONPATH=lib:scripts timeout 150 python3 scripts/probes/tied_wte_bench.py "$OUT/tied_wte.jsonl" 3 10 \
  >"$OUT/tied_wte.log" 2>&1
echo "== tied_wte_bench (exit $?, $(elapsed) s)"; tail -4 "$OUT/tied_wte.log"
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_nvrtc_gpu.py >"$OUT/pytest_nvrtc.log" 2>&1
echo "== nvrtc tests (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)|account|nvrtc at run time" "$OUT/pytest_nvrtc.log" | head
tail -1 "$OUT/pytest_nvrtc.log"
if [ "$(left)" -gt 90 ]; then
  SIDE_CALL_S=$(( $(left) - 10 )) SIDE_STAGES=bench SIDE_LIBS=tied=.cache/variants/tied/lib SIDE_TORCH= \
    SIDE_SELECT=${TW_SELECT:-gpt2-small/bfloat16,gpt2-medium/bfloat16,gpt2-small/float16} SIDE_ROUNDS=${TW_ROUNDS:-2} \
    bash scripts/side_call.sh "$OUT/side"
else
  echo "== the step skipped: $(left) s left"
fi
echo "== done ($(elapsed) s)"
