#!/usr/bin/env bash
# One device call on the float32 attention kernels, this tree against a variant's lib/ (the forty-sixth session's TF32
# rounding by instruction against 3352c68's formula):
#   tests  the kernel tests of F32_TESTS (a pytest -k expression; default the rounding check), under F32_TESTS_S
#   ab     scripts/attention_bench.py, the float32 build alone, for each WHICH:ENVS of F32_AB (WHICH tree or base,
#          ENVS KEY=VALUE[,KEY=VALUE]: the kernel switches of that run; default the tree and the base, each with and
#          without TR2_ATTN_F32_PAIRS)
#   bits   whole runs of both (python -m tr2.train, cupy side, float32, CUDA graph), for each MODEL:STEPS[:FLAG] of
#          F32_BITS (FLAG --no-tf32: the plain float32 of method B, pairs attention), their metrics files compared
#          byte for byte: "identical" or the first differing line; F32_BITS=" " (a space) runs none
# The base is .cache/variants/$F32_BASE/lib (default base), built by scripts/carry_prepare.sh with its cubins; the call
# stops if it is missing, so a call without whole runs names any variant the carry has (F32_BASE=treep).
#   usage: bash scripts/f32_attention_call.sh OUT      F32_CALL_S: seconds the call may take (default 540)
# Carry .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT, data, .cache/variants.
set -u -o pipefail
OUT=${1:?usage: f32_attention_call.sh OUT}
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${F32_CALL_S:-540}"
BASE=.cache/variants/${F32_BASE:-base}/lib
[ -d "$BASE" ] || { echo "no $BASE: prepare the carry with VARIANTS=\"${F32_BASE:-base}=REV\"" >&2; exit 2; }
lib_of() { if [ "$1" = base ]; then echo "$BASE"; else echo lib; fi; }
mkdir -p "$OUT/ab" "$OUT/bits"

timeout "${F32_TESTS_S:-150}" python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py \
  -k "${F32_TESTS:-tf32_rounding}" >"$OUT/pytest.log" 2>&1
echo "== kernel tests (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head; tail -2 "$OUT/pytest.log"

for spec in ${F32_AB:-tree: tree:TR2_ATTN_F32_PAIRS=1 base: base:TR2_ATTN_F32_PAIRS=1}; do
  [ "$(left)" -gt 60 ] || { echo "== ab: out of time before $spec"; break; }
  which=${spec%%:*} envs=${spec#*:}
  name=$which$( [ -n "$envs" ] && echo "-${envs//[=,]/-}" )
  env ${envs//,/ } PYTHONPATH="$(lib_of "$which")" TR2_ATTN_BENCH_BUILDS=float32:exact \
    timeout 45 python3 scripts/attention_bench.py "$OUT/ab/$name.jsonl" 20 >"$OUT/ab/$name.log" 2>&1
  echo "== ab $name (exit $?, $(elapsed) s)"; tail -3 "$OUT/ab/$name.log"
done

for spec in ${F32_BITS:-nanogpt:30 nanogpt:30:--no-tf32 gpt2-small:20 gpt2-small:20:--no-tf32}; do
  IFS=: read -r model steps flag <<<"$spec"
  tag=$model${flag:+-${flag#--}}
  [ "$(left)" -gt 100 ] || { echo "== bits: out of time before $tag"; break; }
  for which in tree base; do
    PYTHONPATH="$(lib_of "$which")" timeout 90 python3 -m tr2.train --side cupy --model "$model" --dtype float32 \
      --device cuda --steps "$steps" --cuda-graph --eval-interval 0 $flag --metrics "$OUT/bits/$tag-$which.jsonl" \
      >"$OUT/bits/$tag-$which.log" 2>&1
    echo "   $tag $which: exit $?, $(wc -l <"$OUT/bits/$tag-$which.jsonl" 2>/dev/null || echo 0) lines"
  done
  if cmp -s "$OUT/bits/$tag-tree.jsonl" "$OUT/bits/$tag-base.jsonl" && [ -s "$OUT/bits/$tag-tree.jsonl" ]; then
    echo "== bits $tag: identical ($(wc -l <"$OUT/bits/$tag-tree.jsonl") lines, $(elapsed) s)"
  else
    echo "== bits $tag: DIFFER"; diff "$OUT/bits/$tag-tree.jsonl" "$OUT/bits/$tag-base.jsonl" | head -4
  fi
done
out_fold "$OUT"
