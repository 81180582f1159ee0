#!/usr/bin/env bash
# One GPU call for a session's start: the whole GPU test suite on this tree, the products record extended, and the
# step's timeline. Stages by SUITE_STAGES (default suite,products,timeline), each skipped when the call's time is short.
#   suite     every gpu-marked test (the four files that hold them; the others need the notebook wheels): kernels against NumPy, graph = eager loop, the sides agree
#   products  python -m tr2.cupy_side.products for SUITE_PRODUCT_MODELS / SUITE_PRODUCT_BUILDS (the record in
#             .cache/products grows; it comes back as OUT/record.tgz)
#   timeline  scripts/timeline_call.sh's traces for SUITE_TIMELINE_MODELS (cupy graph only unless TIMELINE_TORCH=1)
# Carry .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT, data.
#   usage: bash scripts/suite_call.sh [OUT]     SUITE_CALL_S: seconds the call may take (default 560)
set -u -o pipefail
OUT=${1:-${OUT:-$PWD/suite-call-out}}
STAGES=",${SUITE_STAGES:-suite,products,timeline},"
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${SUITE_CALL_S:-560}"
if [[ $STAGES == *,suite,* ]]; then
  timeout "${SUITE_TEST_S:-480}" python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/test_kernels_gpu.py tests/test_graph_gpu.py tests/test_products_gpu.py tests/test_sides_agree.py >"$W/pytest.log" 2>&1
  echo "== suite (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)" "$W/pytest.log" | head -20; tail -2 "$W/pytest.log"
fi
if [[ $STAGES == *,products,* ]] && [ "$(left)" -gt 150 ]; then
  timeout $(( $(left) - 120 )) python3 -m tr2.cupy_side.products --models "${SUITE_PRODUCT_MODELS:-gpt2-medium}" \
    --builds "${SUITE_PRODUCT_BUILDS:-bf16r}" >"$W/products.log" 2>&1
  echo "== products (exit $?, $(elapsed) s)"; tail -4 "$W/products.log" | cut -c1-220
  (cd .cache && tar czf "$OUT/record.tgz" products)
fi
if [[ $STAGES == *,timeline,* ]]; then
  mkdir -p "$W/timeline"
  for m in ${SUITE_TIMELINE_MODELS:-gpt2-small}; do
    [ "$(left)" -gt 100 ] || break
    for r in "cupy-graph --side cupy --half-roundings --cuda-graph" ${TIMELINE_TORCH:+"torch-ro --side torch --mode reduce-overhead"}; do
      set -- $r; name=$m-$1; shift
      timeout 150 python3 -m tr2.profile_run --window 100 130 --trace --out "$W/timeline/$name" "$@" \
        --model "$m" --dtype bfloat16 --device cuda --steps 130 >"$W/timeline/$name.log" 2>&1 || echo "$name: exit $?"
      python3 scripts/timeline.py "$W/timeline/$name/trace.json" 30 --json "$W/timeline/$name/gaps.json" \
        >>"$W/timeline/table.txt" 2>&1
      gzip -f "$W/timeline/$name/trace.json" 2>/dev/null
    done
  done
  (cd "$W" && tar czf "$OUT/timeline.tgz" timeline) && head -4 "$W/timeline/table.txt"
fi
(cd "$W" && tar czf "$OUT/logs.tgz" *.log)
