#!/usr/bin/env bash
# The cupy side's GPU check, for the GPU machine (the device tool's copy of the repo):
# installs carried wheels if any, builds every kernel (NVRTC) and loads cuBLAS, runs the GPU kernel tests
# and their CPU counterparts, the other GPU-marked tests, and short trainings on the CUDA backend, and
# writes under OUT: env.json, pytest.log, junit.xml, kernel_errors.json, pytest_others.log, train.log,
# summary.json (at most 8 files: what the device tool brings back). Prints a short table last.
#   usage: bash scripts/gpu_check.sh [OUT]      (OUT defaults to $OUT, else ./gpu-check-out)
#   TR2_GIT_COMMIT / TR2_GIT_DIRTY record the commit where .git does not travel with the tree;
#   TR2_TRAIN_SMOKE=0 skips the trainings; TR2_OTHER_GPU_TESTS=0 skips the other GPU-marked tests (the
#   sides' agreement on the CUDA backend, tests/test_sides_agree.py, and the CUDA graph's replay against
#   the eager loop, tests/test_graph_gpu.py).
set -u -o pipefail
OUT=${1:-${OUT:-$PWD/gpu-check-out}}
mkdir -p "$OUT"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/lib${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export CUPY_CACHE_DIR="${CUPY_CACHE_DIR:-$PWD/.cache/cupy}"
[ -d data ] && export TR2_DATA="$PWD/data"

nvidia-smi || true
python3 scripts/gpu_check.py env "$OUT"

TR2_KERNEL_REPORT="$OUT/kernel_errors.json" timeout "${TR2_TEST_TIMEOUT:-300}" \
  python3 -m pytest -q -p no:cacheprovider -rfE tests/test_gpu_backend_cpu.py tests/test_kernels_gpu.py \
  --junitxml="$OUT/junit.xml" 2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|error|^FAILED|^ERROR" | tail -40

if [ "${TR2_OTHER_GPU_TESTS:-1}" = 1 ]; then
  timeout 300 python3 -m pytest -q -s -p no:cacheprovider -rfE -m gpu tests/test_sides_agree.py tests/test_graph_gpu.py \
    >"$OUT/pytest_others.log" 2>&1
  echo "other GPU-marked tests: $(tail -1 "$OUT/pytest_others.log")"
fi

train() {  # train NAME TIMEOUT ARGS...: one section of train.log
  local name=$1 limit=$2; shift 2
  echo "=== $name ===" >>"$OUT/train.log"
  timeout "$limit" python3 -m tr2.train --side cupy --device cuda "$@" >>"$OUT/train.log" 2>&1
  echo "exit $?" >>"$OUT/train.log"
}
if [ "${TR2_TRAIN_SMOKE:-1}" = 1 ]; then
  : >"$OUT/train.log"
  train tiny-float32 60 --model tiny --dtype float32 --steps 30
  train nanogpt-bfloat16 120 --model nanogpt --dtype bfloat16 --steps 40
  train nanogpt-bfloat16-half-roundings 90 --model nanogpt --dtype bfloat16 --half-roundings --steps 20
  train nanogpt-float16 90 --model nanogpt --dtype float16 --steps 20
  train gpt2-small-bfloat16 150 --model gpt2-small --dtype bfloat16 --steps 10 --log-interval 5
fi
python3 scripts/gpu_check.py summary "$OUT"
