#!/usr/bin/env bash
# One device call on a kernel switch (written for the fifty-third session's resident float32 dQ): its kernel tests,
# then the kernel alone under Nsight Compute with the switch off and on in turn, then whole runs with it off and on,
# their metrics files compared byte for byte.
#   AB_SWITCH   the environment variable (e.g. TR2_ATTN_F32_WG_DQ); its values AB_OFF and AB_ON (default 0, 1)
#   AB_LIB_OFF  instead of AB_SWITCH, for a change a switch cannot select (a macro in a kernel's source): a lib/ folder
#               (another commit's, as scripts/carry_prepare.sh's VARIANTS places it: .cache/variants/NAME/lib, its
#               cubins in the carried archive) whose program is "off", first on PYTHONPATH; this tree's is "on"
#   AB_TESTS    a pytest -k expression over tests/test_kernels_gpu.py (empty: none), under AB_TESTS_S (default 200)
#   AB_KERNEL   ncu's kernel regex; AB_NCU the MODEL:DTYPE:HR runs, separated by spaces (default "gpt2-small:float32:0
#               gpt2-medium:float32:0"), run AB_ROUNDS times (default 2), off then on each time (scripts/attention_ncu.py, SpeedOfLight and
#               Occupancy), each under AB_NCU_S seconds (default 60, and not started with fewer left); the durations
#               in durations.txt
#   AB_BITS     the MODEL:DTYPE:STEPS[:BUILD] of the whole runs, separated by spaces (python -m tr2.train, cupy side,
#               CUDA graph; BUILD hr adds --half-roundings, the build the H200 cards compare and the one the half types'
#               wgmma and TMA attention kernels serve, notf32 adds --no-tf32, plain float32 as method B runs it; default
#               gpt2-small:float32:12; empty: none), off and on; "identical" or the first differing lines.
#               AB_DEVICE=cpu runs them on the CPU without the graph (the script's CPU test)
#   usage: bash scripts/switch_ab_call.sh OUT      AB_CALL_S: seconds the call may take (default 540)
# Carry .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT, data.
set -u -o pipefail
OUT=${1:?usage: switch_ab_call.sh OUT}
if [ -n "${AB_LIB_OFF:-}" ]; then
  [ -d "$AB_LIB_OFF/tr2" ] || { echo "AB_LIB_OFF=$AB_LIB_OFF: no tr2 package there (a lib/ folder: .cache/variants/NAME/lib)" >&2; exit 2; }
  AB_LIB_OFF=$(cd "$AB_LIB_OFF" && pwd) AB_SWITCH=lib OFF=off ON=on
else
  : "${AB_SWITCH:?AB_SWITCH=<a switch variable> (or AB_LIB_OFF=<the lib/ of the off program>)}"
  OFF=${AB_OFF:-0} ON=${AB_ON:-1}
fi
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${AB_CALL_S:-540}"
as_value() {   # as_value VALUE COMMAND...: the command with the switch at VALUE, or with the off program's lib first
  local value=$1; shift
  if [ "$AB_SWITCH" = lib ]; then
    if [ "$value" = off ]; then env PYTHONPATH="$AB_LIB_OFF:$PYTHONPATH" "$@"; else "$@"; fi
  else
    env "$AB_SWITCH=$value" "$@"
  fi
}
mkdir -p "$OUT/ncu"
if [ -n "${AB_TESTS:-}" ]; then
  timeout "${AB_TESTS_S:-200}" python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py -k "$AB_TESTS" \
    >"$OUT/tests.log" 2>&1
  echo "== tests (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head; tail -1 "$OUT/tests.log"
fi
: >"$OUT/durations.txt"
if [ -n "${AB_KERNEL:-}" ]; then
  for round in $(seq 1 "${AB_ROUNDS:-2}"); do
    for spec in ${AB_NCU:-gpt2-small:float32:0 gpt2-medium:float32:0}; do
      IFS=: read -r model dtype hr <<<"$spec"
      for value in "$OFF" "$ON"; do
        [ "$(left)" -gt "${AB_NCU_S:-60}" ] || { echo "== ncu: out of time before round $round $spec $value"; break 3; }
        f="$OUT/ncu/$model-$dtype-$hr-r$round-$value.txt"
        as_value "$value" timeout "${AB_NCU_S:-60}" ncu --clock-control none -k "regex:$AB_KERNEL" --profile-from-start off \
          --section SpeedOfLight --section Occupancy python3 scripts/attention_ncu.py "$model" "$dtype" "$hr" >"$f" 2>&1
        rc=$?
        awk -v tag="round $round $model $dtype hr=$hr $AB_SWITCH=$value" '
          /^  [a-zA-Z_]+.*\(/ {name = $1} /Duration/ {print tag, name, $(NF-1), $NF}' "$f" | tee -a "$OUT/durations.txt"
        [ $rc -eq 0 ] || echo "   ncu exit $rc"
      done
    done
  done
fi
DEVICE=${AB_DEVICE:-cuda}
GRAPH=$([ "$DEVICE" = cuda ] && echo --cuda-graph)
for spec in ${AB_BITS-gpt2-small:float32:12}; do
  IFS=: read -r model dtype steps build <<<"$spec"
  case ${build:-} in
    '') flag='' tag=$model-$dtype ;;
    hr) flag=--half-roundings tag=$model-$dtype-hr ;;
    notf32) flag=--no-tf32 tag=$model-$dtype-notf32 ;;
    *) echo "== bits $spec: BUILD '$build' is not allowed; allowed: hr (--half-roundings), notf32 (--no-tf32) or none"; continue ;;
  esac
  [ "$(left)" -gt 60 ] || { echo "== bits: out of time before $spec"; break; }
  for value in "$OFF" "$ON"; do
    as_value "$value" timeout 100 python3 -m tr2.train --side cupy --model "$model" --dtype "$dtype" --device "$DEVICE" \
      --steps "$steps" $GRAPH $flag --eval-interval 0 --metrics "$OUT/m-$tag-$value.jsonl" \
      >"$OUT/t-$tag-$value.log" 2>&1
    echo "   $model $dtype${flag:+ $flag} $AB_SWITCH=$value: exit $?"
  done
  a="$OUT/m-$tag-$OFF.jsonl" b="$OUT/m-$tag-$ON.jsonl"
  lines=$(cat "$a" 2>/dev/null | wc -l)
  if [ -s "$a" ] && cmp -s "$a" "$b"; then
    echo "== bits $spec: identical, $lines lines"
  else
    echo "== bits $spec: DIFFER or missing"
    diff "$a" "$b" 2>&1 | head -4
  fi
done
echo "== done ($(elapsed) s)"
out_fold "$OUT"
