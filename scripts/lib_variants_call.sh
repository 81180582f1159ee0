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
bench() {  # bench NAME LIBDIR
  PYTHONPATH="$2:/tmp/site" timeout 200 python3 scripts/attention_bench.py "$W/$1.jsonl" 20 >"$W/$1.bench.log" 2>&1
}
[ -d .cache/baseline/lib ] && bench baseline "$PWD/.cache/baseline/lib"
bench committed "$PWD/lib"
for d in .cache/variants/*/; do
  v=$(basename "$d")
  PYTHONPATH="$PWD/$d/lib:/tmp/site" timeout "${TR2_TEST_TIMEOUT:-240}" python3 -m pytest -q -p no:cacheprovider -rfE \
    tests/test_kernels_gpu.py -k attention >"$W/$v.tests.log" 2>&1
  bench "$v" "$PWD/$d/lib"
done
(cd "$W" && tar czf "$OUT/variants.tgz" .)
{ for f in "$W"/*.bench.log; do echo "== $(basename "$f" .bench.log) $(tail -1 "${f%.bench.log}.tests.log" 2>/dev/null)"
    tail -n +2 "$f" | grep -v "^model" | tail -8; done; } >"$OUT/table.txt"
cat "$OUT/table.txt"
