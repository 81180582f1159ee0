#!/usr/bin/env bash
# One GPU call for the step graph's launch (docs/perf.md, "Forty-first session": the launch after a loss read;
# TR2_ZERO_BY_KERNEL, gpu/cast.py's zero, and TR2_STEP_GRAPHS, gpu/graph.py, both off by default):
#   1. scripts/probes/graph_launch_probe.py: chains of empty kernels (plain, a memset, a memcpy, a fork and join, a
#      cluster launch) and the training step's graph (GL_MODEL, default gpt2-small, bfloat16) with TR2_ZERO_BY_KERNEL
#      off then on; nanogpt float32 (its cuBLAS memsets kept in line) with it on; the step in two graphs
#      (TR2_STEP_GRAPHS=2: its first part's launch beside the whole replay's): each graph's shape and launch times
#   2. the kernel test of cast.zero, then tests/test_graph_gpu.py's replays_train with the switch on (the same bits),
#      and the two-graph step's tests (eager, one graph and two graphs to the bit; the side stream among them)
#   3. where time is left, the step (graph, no torch): the variant `zk` (TR2_ZERO_BY_KERNEL=1) against this tree,
#      GL_SELECT (default nanogpt and gpt2-small in bf16), GL_ROUNDS rounds (default 2), rotating; GL_LIBS instead
#      names the variants (e.g. zk=.cache/variants/zk/lib,sg=.cache/variants/sg/lib)
# Carry: VARIANTS="zk=tree:TR2_ZERO_BY_KERNEL=1 sg=tree:TR2_STEP_GRAPHS=2" RECORD=results/h100-perf-20261205g/record
#          (both cards' products records; copy the folder to /tmp first where the tree is slim) \
#          TR2_NVRTC=<libnvrtc.so.12> \
#          bash scripts/carry_prepare.sh; then scripts/device_tree.sh slim
#   run tool carry: ["data", ".cache/kernels.tar.xz", ".cache/products", ".cache/nanoGPT", ".cache/variants"]
#   usage: TR2_GIT_COMMIT=<40 hex> bash scripts/graph_launch_call.sh "$OUT"   (GL_CALL_S, default 570: the call's seconds)
set -u -o pipefail
OUT=${1:?OUT}
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${GL_CALL_S:-570}"
[ -d .cache/variants ] && ln -sfn "$(cd ../shared && pwd)" .cache/variants/shared   # a variant's lib finds the data there
MODEL=${GL_MODEL:-gpt2-small}
# each stage's timeout: its own limit, or what is left of the call less 30 s (out_fold and the tool's transfer);
# a stage with under 30 s of it is skipped and says so, so the call ends inside GL_CALL_S with its files folded
limit() { local l=$(( $(left) - 30 )); if [ "$l" -lt "$1" ]; then echo "$l"; else echo "$1"; fi; }
stage() {   # stage NAME LIMIT_S LOG COMMAND...: COMMAND under its timeout, its output in LOG
  local name=$1 t; t=$(limit "$2"); local log=$3; shift 3
  if [ "$t" -lt 30 ]; then echo "== $name skipped: $(left) s left"; return 99; fi
  timeout "$t" "$@" >"$log" 2>&1
  local rc=$?
  echo "== $name (exit $rc, $(elapsed) s)"
  return $rc
}
for zk in 0 1; do
  stage "probe, TR2_ZERO_BY_KERNEL=$zk" 150 "$OUT/launch-$zk.log" env TR2_ZERO_BY_KERNEL=$zk \
    python3 scripts/probes/graph_launch_probe.py --model "$MODEL" --out "$OUT/launch-$zk.jsonl"
  tail -8 "$OUT/launch-$zk.log"
done
stage "probe, the step in two graphs" 120 "$OUT/launch-sg.log" env TR2_STEP_GRAPHS=2 \
  python3 scripts/probes/graph_launch_probe.py --model "$MODEL" --chain 2 --out "$OUT/launch-sg.jsonl"
tail -1 "$OUT/launch-sg.log"
stage "kernel tests" 120 "$OUT/pytest_kernels.log" env TR2_ZERO_BY_KERNEL=1 \
  python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py -k zero_sets
grep -E "^(FAILED|ERROR)" "$OUT/pytest_kernels.log" | head; tail -1 "$OUT/pytest_kernels.log"
stage "graph tests, TR2_ZERO_BY_KERNEL=1" 150 "$OUT/pytest_graph.log" env TR2_ZERO_BY_KERNEL=1 \
  python3 -m pytest -q -s -p no:cacheprovider -rfE tests/test_graph_gpu.py -k replays_train
grep -E "^(FAILED|ERROR)|max rel" "$OUT/pytest_graph.log" | head; tail -1 "$OUT/pytest_graph.log"
stage "two-graph tests" 240 "$OUT/pytest_graph2.log" \
  python3 -m pytest -q -s -p no:cacheprovider -rfE tests/test_graph_gpu.py -k two_step_graphs
grep -E "^(FAILED|ERROR)|max rel" "$OUT/pytest_graph2.log" | head; tail -1 "$OUT/pytest_graph2.log"
stage "probe, nanogpt float32" 90 "$OUT/launch-f32.log" env TR2_ZERO_BY_KERNEL=1 \
  python3 scripts/probes/graph_launch_probe.py --model nanogpt --dtype float32 --chain 2 --out "$OUT/launch-f32.jsonl"
tail -1 "$OUT/launch-f32.log"
if [ "$(left)" -gt 150 ]; then
  SIDE_CALL_S=$(( $(left) - 40 )) SIDE_STAGES=bench SIDE_LIBS=${GL_LIBS:-zk=.cache/variants/zk/lib} SIDE_TORCH= \
    SIDE_SELECT=${GL_SELECT:-nanogpt/bfloat16,gpt2-small/bfloat16} SIDE_ROUNDS=${GL_ROUNDS:-2} \
    bash scripts/side_call.sh "$OUT/side"
else
  echo "== the step skipped: $(left) s left (run it in the next call: docs/perf.md, 'Next, in order')"
fi
echo "== done ($(elapsed) s)"
out_fold "$OUT"
