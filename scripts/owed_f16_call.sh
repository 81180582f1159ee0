#!/usr/bin/env bash
# One GPU call for the checks owed after the thirtieth session (docs/perf.md, "Next, in order (after the thirtieth
# session)", item 1): float16 GELU within an ulp became the default (TR2_GELU_F16_FAST=1, b89c830) after the device
# time ran out, so the whole-step checks of issue 9's "what must hold" were not run with it:
#   1. tests/test_graph_gpu.py -k replays_train: graph = eager to the bit (nanogpt float16 among its cases)
#   2. device_bench.py losscheck: the char model's bf16 and f16 losses at step 400 within five torch seeds' spread,
#      the cupy builds hr, exact and hr-graph (the compared one); 16 runs in parallel, a loss check, not a timing
#   3. the float16 rows beside PyTorch's reduce-overhead (side_call.sh's bench): OWED_SELECT (default nanogpt and
#      gpt2-small in float16), OWED_ROUNDS rounds (default 3)
# Carry (prepared on the CPU machine at the commit to run, then `scripts/device_tree.sh slim`):
#   RECORD=results/h200-perf-20261202d/call4-0ad6d96/record PATH=$PWD/.venv/bin:$PATH TR2_NVRTC=<libnvrtc.so.12> \
#     bash scripts/carry_prepare.sh
#   run tool carry: ["data", ".cache/kernels.tar.xz", ".cache/products", ".cache/nanoGPT"]
#   usage: TR2_GIT_COMMIT=<40 hex> bash scripts/owed_f16_call.sh "$OUT"   (OWED_CALL_S, default 560: the call's seconds)
set -u -o pipefail
OUT=${1:?OUT}
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${OWED_CALL_S:-560}"
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_graph_gpu.py -k replays_train \
  >"$OUT/pytest_graph.log" 2>&1
echo "== replays_train (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_graph.log" | head; tail -1 "$OUT/pytest_graph.log"
timeout 200 python3 scripts/device_bench.py "$W/r" losscheck:180 >"$OUT/losscheck.log" 2>&1
echo "== losscheck (exit $?, $(elapsed) s)"; grep "^losscheck" "$OUT/losscheck.log"
cp "$W/r/losscheck.jsonl" "$OUT/" 2>/dev/null
[ -d "$W/r/losscheck" ] && (cd "$W/r" && tar czf "$OUT/losscheck-logs.tgz" losscheck)
if [ "$(left)" -gt 120 ]; then
  SIDE_CALL_S=$(( $(left) - 10 )) SIDE_STAGES=bench SIDE_LIBS= SIDE_TORCH=reduce-overhead \
    SIDE_SELECT=${OWED_SELECT:-nanogpt/float16,gpt2-small/float16} SIDE_ROUNDS=${OWED_ROUNDS:-3} \
    bash scripts/side_call.sh "$OUT/side"
else
  echo "== the float16 rows skipped: $(left) s left"
fi
echo "== done ($(elapsed) s)"
