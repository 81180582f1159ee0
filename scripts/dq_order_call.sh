#!/usr/bin/env bash
# One GPU call for the twenty-seventh session's last items (docs/perf.md "Next, in order (after the twenty-seventh
# session)"):
#   0. the whole-run identity check of this program (the bulk LayerNorm backward on by default since d6332fc) against
#      the method A edition folder's records: the four cupy configurations' seed-1337 runs, 250 steps; then the
#      graph = eager tests at the defaults (tests/test_graph_gpu.py, replays_train)
#   1. the TMA dQ with its grid swapped (TR2_ATTN_DQ_TMA_ORDER=1, attn_backward_dq_ds_tmaqf_; written after the
#      device time, NOT run): its kernel cases against the plain TMA dQ's bits, under their own limit
#   2. the backward alone, tmarrq (the default) against tmarrqf (scripts/attention_backward_variants.py), where 1 passed
#   3. Nsight Compute on both dQ kernels at gpt2-small's shape (DRAM and L2 bytes and rates, stalls): what the pass
#      moves and how fast, whatever 1 gave
#   4. the bulk LayerNorm backward at 384 columns with two blocks an SM (written after the device time, NOT run): its
#      kernel cases at 384, then Nsight Compute on nanogpt's shape, plain (TR2_LN_BWD_BULK=0) against it (=2)
# Carry data, .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT (no variants).
#   usage: TR2_GIT_COMMIT=<40 hex> bash scripts/dq_order_call.sh OUT     (DQ_CALL_S, default 560)
set -u -o pipefail
OUT=${1:?OUT}
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${DQ_CALL_S:-560}"
F=results/method_a-20261202-170258-h200-edition
timeout 120 python3 scripts/identity_check.py $F --steps 250 --runs nanogpt/float32/cupy/1337 nanogpt/bfloat16/cupy/1337 \
  gpt2-small/float32/cupy/1337 gpt2-small/bfloat16/cupy/1337 --out "$OUT/identity.jsonl" --scratch /tmp/identity.runs \
  >"$OUT/identity.log" 2>&1
echo "== identity check (exit $?, $(elapsed) s)"; tail -4 "$OUT/identity.log"
# the graph = eager loop at the defaults (the bulk LayerNorm backward on since d6332fc; not run on the H200 since)
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_graph_gpu.py -k replays_train >"$OUT/pytest_graph.log" 2>&1
echo "== graph = eager (exit $?, $(elapsed) s)"; tail -2 "$OUT/pytest_graph.log"
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py -k dq_tma_query_blocks_fastest \
  >"$OUT/pytest_dqqf.log" 2>&1
tests=$?
echo "== swapped dQ's tests (exit $tests, $(elapsed) s)"; tail -2 "$OUT/pytest_dqqf.log"
if [ "$tests" -eq 0 ]; then
  TR2_BWD_FORMS=tmarrq,tmarrqf timeout 150 python3 scripts/attention_backward_variants.py "$OUT/bwd.jsonl" 3 20 \
    >"$OUT/bwd.log" 2>&1
  echo "== backward forms (exit $?, $(elapsed) s)"; tail -12 "$OUT/bwd.log"
fi
# ncu_pair TESTS_EXIT KERNEL_REGEX NAME SWITCH "A B" SCRIPT ARGS...: Nsight Compute on one launch of the second pass of
# SCRIPT, once with SWITCH=A and, where TESTS_EXIT is 0, once with SWITCH=B; OUT/ncu-NAME-<value>.txt
ncu_pair() {
  local tests=$1 regex=$2 name=$3 switch=$4 values=$5 v
  shift 5
  for v in $values; do
    [ "$(left)" -gt 30 ] || break
    [ "$v" != "${values%% *}" ] && [ "$tests" -ne 0 ] && break
    env "$switch=$v" timeout 60 ncu --clock-control none -k "regex:$regex" --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
      python3 "$@" >"$OUT/ncu-$name-$v.txt" 2>&1
    echo "== ncu $name, $switch=$v (exit $?, $(elapsed) s)"
    grep -E "^  [a-z]|Duration  |DRAM Throughput|L2 Cache Throughput|Achieved Occ" "$OUT/ncu-$name-$v.txt"
  done
}
ncu_pair "$tests" attn_backward_dq dq TR2_ATTN_DQ_TMA_ORDER "0 1" scripts/attention_ncu.py gpt2-small bfloat16 1
timeout 90 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py -k "bulk_is_the_same_bits and 384" \
  >"$OUT/pytest_bulk384.log" 2>&1
ln_tests=$?
echo "== bulk backward at 384, two blocks an SM (exit $ln_tests, $(elapsed) s)"; tail -2 "$OUT/pytest_bulk384.log"
ncu_pair "$ln_tests" residual_layernorm_backward ln384 TR2_LN_BWD_BULK "0 2" scripts/layernorm_ncu.py nanogpt
echo "== done ($(elapsed) s)"
out_fold "$OUT"
