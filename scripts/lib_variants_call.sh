#!/usr/bin/env bash
# One GPU call that tries variants of the kernels: each .cache/variants/<name>/ holds a patched copy of lib/ (and
# params/), its cubins built ahead into .cache/kernels (carry both). For each variant: the attention kernel tests
# (tests/test_kernels_gpu.py -k attention) and scripts/attention_bench.py under that lib; the committed lib's bench
# first, and .cache/baseline's (an older commit's lib + params) if present. Writes OUT/machine.txt, variants.tgz,
# table.txt; prints the table last.   usage: bash scripts/lib_variants_call.sh [OUT]
set -u -o pipefail
OUT=${1:-${OUT:-$PWD/variants-out}}
W=$(mktemp -d)
mkdir -p "$OUT"
source scripts/device_env.sh || exit 1
export TR2_KERNEL_CACHE="$PWD/.cache/kernels"
machine_record "$OUT/machine.txt"
# the variants' lib copies find ../shared (nanoGPT, for the tests' start-up check) beside themselves
ln -sfn "$(cd ../shared && pwd)" .cache/variants/shared
LIBS="committed:$PWD/lib"
[ -d .cache/baseline/lib ] && LIBS="baseline:$PWD/.cache/baseline/lib $LIBS"
for d in .cache/variants/*/; do
  v=$(basename "$d")
  [ "$v" = shared ] && continue
  LIBS="$LIBS $v:$PWD/$d/lib"
  PYTHONPATH="$PWD/$d/lib:/tmp/site" timeout "${TR2_TEST_TIMEOUT:-240}" python3 -m pytest -q -p no:cacheprovider -rfE \
    tests/test_kernels_gpu.py -k attention >"$W/$v.tests.log" 2>&1
done
# the benches in rotating rounds (clocks are not locked: one pass each ranks the order as much as the kernels)
for round in $(seq 1 "${VARIANT_ROUNDS:-2}"); do
  for spec in $LIBS; do
    name=${spec%%:*}
    PYTHONPATH="${spec#*:}:/tmp/site" timeout 200 python3 scripts/attention_bench.py "$W/$name.jsonl" 20 \
      >"$W/$name.r$round.bench.log" 2>&1
  done
done
(cd "$W" && tar czf "$OUT/variants.tgz" .)
{ for spec in $LIBS; do name=${spec%%:*}; echo "== $name $(tail -1 "$W/$name.tests.log" 2>/dev/null)"
    for f in "$W/$name".r*.bench.log; do echo "-- $(basename "$f" .bench.log)"; grep -E "^(nanogpt|gpt2)" "$f"; done; done
} >"$OUT/table.txt"
cat "$OUT/table.txt"
