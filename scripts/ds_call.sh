#!/usr/bin/env bash
# GPU call(s) for the attention backward with dS stored (attention.cu's attention_backward_dq_ds, gpu/attention.py's
# stores_ds): stages chosen by DS_STAGES (default tests,variants,bench), each skipped when the call's time is short.
#   tests     the attention kernel tests (the dS-stored form at every shape among them) and test_graph_gpu
#             (graph = eager loop to the bit, gpt2-small bf16 among the models: its backward stores dS)
#   variants  scripts/attention_backward_variants.py: recompute / ds / fold in one process, outputs then time
#   kernels   scripts/attention_backward_kernels.py: each backward kernel of each form alone
#   ncu       Nsight Compute on the GELU kernels (scripts/elementwise_ncu.py), nanogpt and gpt2-small; DS_GELU_FORM
#             table (default, bf16 by table) or compute (the computing kernels)
#   bench     this lib against .cache/baseline's beside torch reduce-overhead, bf16, DS_SELECT (default the
#             three models), DS_ROUNDS rounds (default 2); DS_LIBS= (empty): this lib alone
# Carry .cache/kernels.tar.xz (or .cache/kernels), .cache/products (the products record), data, .cache/nanoGPT,
# .cache/baseline (`git archive main lib params | tar x -C .cache/baseline`).
#   usage: bash scripts/ds_call.sh [OUT]     DS_CALL_S: seconds the call may take (default 560)
set -u -o pipefail
OUT=${1:-${OUT:-$PWD/ds-call-out}}
STAGES=",${DS_STAGES:-tests,variants,bench},"
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${DS_CALL_S:-560}"
if [[ $STAGES == *,tests,* ]]; then
  timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py -k "attention" >"$W/pytest.log" 2>&1
  timeout 200 python3 -m pytest -q -s -p no:cacheprovider -rfE -m gpu tests/test_graph_gpu.py >"$W/pytest_graph.log" 2>&1
  (cd "$W" && tar czf "$OUT/tests.tgz" pytest.log pytest_graph.log)
  echo "== tests"; tail -3 "$W/pytest.log"; grep -E "graph vs eager|passed|failed" "$W/pytest_graph.log" | tail -8
fi
if [[ $STAGES == *,variants,* ]] && [ "$(left)" -gt 100 ]; then
  timeout 150 python3 scripts/attention_backward_variants.py "$W/bwd.jsonl" 5 20 >"$W/bwd.log" 2>&1
  (cd "$W" && tar czf "$OUT/bwd.tgz" bwd.jsonl bwd.log)
  echo "== attention backward forms"; cat "$W/bwd.log" | tail -20
fi
if [[ $STAGES == *,kernels,* ]] && [ "$(left)" -gt 100 ]; then
  timeout 120 python3 scripts/attention_backward_kernels.py "$W/kernels.jsonl" 3 10 nanogpt,gpt2-small >"$W/kernels.log" 2>&1
  (cd "$W" && tar czf "$OUT/kernels.tgz" kernels.jsonl kernels.log)
  echo "== attention backward kernels"; tail -12 "$W/kernels.log"
fi
if [[ $STAGES == *,ncu,* ]] && [ "$(left)" -gt 100 ]; then
  for m in nanogpt gpt2-small; do
    timeout 90 ncu --clock-control none -k regex:gelu_ --launch-skip 4 --launch-count 2 --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
      --section InstructionStats python3 scripts/elementwise_ncu.py $m ${DS_GELU_FORM:-table} >"$W/ncu-gelu-$m.txt" 2>&1
  done
  (cd "$W" && tar czf "$OUT/ncu.tgz" ncu-gelu-*.txt)
  echo "== ncu gelu"; grep -hE "^  gelu_|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Executed Ipc A" "$W"/ncu-gelu-*.txt
fi
L=$(left)
if [[ $STAGES == *,bench,* ]] && [ "$L" -gt 120 ]; then
  TR2_BENCH_ROUNDS=${DS_ROUNDS:-2} TR2_BENCH_CUPY=graph TR2_BENCH_CUPY_LIBS=${DS_LIBS-main=.cache/baseline/lib} \
    TR2_BENCH_TORCH_MODES=reduce-overhead TR2_BENCH_SELECT=${DS_SELECT:-nanogpt/bfloat16,gpt2-small/bfloat16,gpt2-medium/bfloat16} \
    timeout "$L" python3 scripts/device_bench.py "$W/bench" "bench:$((L - 15))" >"$W/bench.log" 2>&1
  (cd "$W" && tar czf "$OUT/bench.tgz" bench bench.log)
  echo "== bench"; tail -8 "$W/bench.log"
fi
