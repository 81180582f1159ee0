#!/usr/bin/env bash
# One GPU call for the products through cuBLASLt (branch lt: gpu/lt.py, cupy_side/products.py): the products' GPU
# tests (every cuBLASLt candidate against float64, the record written and read back), the matmul kernel tests and
# the graph = eager loop tests on the Lt path; then the products record built for the models (its log and the JSON
# come back); then the step of this lib (Lt, the record) against .cache/baseline's (cublasGemmEx) beside torch
# reduce-overhead, bf16, nanogpt and gpt2-small, in rotating rounds. Carry .cache/kernels.tar.xz (or
# .cache/kernels), data, .cache/nanoGPT, .cache/baseline (`git archive main lib params | tar x -C .cache/baseline`).
#   usage: bash scripts/lt_call.sh [OUT]     LT_CALL_S: seconds the call may take (default 560);
#   LT_MODELS / LT_BUILDS: what the record covers (default nanogpt,gpt2-small / bf16r,tf32: what the bench runs, and
#   TF32 for the float32 rows; the record is resumable, a later call adds the rest)
set -u -o pipefail
OUT=${1:-${OUT:-$PWD/lt-call-out}}
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${LT_CALL_S:-560}"
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_products_gpu.py tests/test_kernels_gpu.py \
  -k "products or matmul or capture or peak" >"$W/pytest.log" 2>&1
timeout 150 python3 -m pytest -q -s -p no:cacheprovider -rfE -m gpu tests/test_graph_gpu.py >"$W/pytest_graph.log" 2>&1
(cd "$W" && tar czf "$OUT/tests.tgz" pytest.log pytest_graph.log)
tail -1 "$W/pytest.log"; tail -1 "$W/pytest_graph.log"
timeout 200 python3 -m tr2.cupy_side.products --models "${LT_MODELS:-nanogpt,gpt2-small}" \
  --builds "${LT_BUILDS:-bf16r,tf32}" >"$W/products.log" 2>&1
echo "products: exit $? ($(grep -c ' candidates, ' "$W/products.log") products timed)"
mkdir -p "$W/record" && cp .cache/products/*.json "$W/record/" 2>/dev/null
(cd "$W" && tar czf "$OUT/products.tgz" products.log record)
L=$(left)
if [ "$L" -gt 120 ]; then
  TR2_BENCH_ROUNDS=2 TR2_BENCH_CUPY=graph TR2_BENCH_CUPY_LIBS=gemmex=.cache/baseline/lib TR2_BENCH_TORCH_MODES=reduce-overhead \
    TR2_BENCH_SELECT=nanogpt/bfloat16,gpt2-small/bfloat16 timeout "$L" python3 scripts/device_bench.py "$W/bench" \
    "bench:$((L - 15))" >"$W/bench.log" 2>&1
  (cd "$W" && tar czf "$OUT/bench.tgz" bench bench.log)
fi
echo "== products (chosen against the heuristic's first and cublasGemmEx)"; grep " candidates, " "$W/products.log" | cut -c1-260 | head -40
echo "== bench"; tail -6 "$W/bench.log" 2>/dev/null
