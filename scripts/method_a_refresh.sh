#!/usr/bin/env bash
# One device call that brings a finished method A folder to this checkout's program (docs/h200-edition.md, "Reusing
# method A runs across commits", its three steps without a person between them):
#   1. scripts/identity_check.py: each cupy configuration's seed-1337 run again through step REFRESH_STEPS (250),
#      against the folder's record (REFRESH_RUNS: the run keys checked; default the four of the H200 edition)
#   2. scripts/retire_differing.py: every configuration that differs is retired (all its seeds), its reason naming
#      the check; a check that cannot decide (a rerun that failed) stops here with nothing retired
#   3. where something was retired: scripts/edition_call.sh OUT/e (the rest of the limit) method_a=FOLDER, which runs
#      exactly the retired runs again
# The folder travels with the tree: `scripts/device_tree.sh slim FOLDER`; it comes back in OUT/e/results.tgz (with
# its retired.jsonl and retired/); OUT/identity.jsonl, OUT/retire.log beside it. Render here afterwards:
# `python -m tr2.runner method_a --render FOLDER`.
#   usage: TR2_GIT_COMMIT=<40 hex> bash scripts/method_a_refresh.sh OUT LIMIT_S FOLDER
set -u -o pipefail
OUT=${1:?OUT} LIMIT_S=${2:?LIMIT_S} FOLDER=${3:?FOLDER}
[ -d "$FOLDER" ] || { echo "method_a_refresh.sh: FOLDER '$FOLDER' is not a folder here; allowed: a method A results folder (did it travel? scripts/device_tree.sh slim FOLDER)" >&2; exit 2; }
source scripts/device_env.sh || exit 1
call_begin "$OUT" "$LIMIT_S"
# the identity check's runs read the card's products record or stop: without it cuBLASLt's heuristic chooses other
# algorithms and a configuration differs for that alone (the 59th session retired nanogpt bfloat16 so; undone)
export TR2_REQUIRE_PRODUCTS=1
RUNS=${REFRESH_RUNS:-nanogpt/float32/cupy/1337 nanogpt/bfloat16/cupy/1337 gpt2-small/float32/cupy/1337 gpt2-small/bfloat16/cupy/1337}
# shellcheck disable=SC2086
timeout $(( $(left) - 30 )) python3 scripts/identity_check.py "$FOLDER" --steps "${REFRESH_STEPS:-250}" --runs $RUNS \
  --out "$OUT/identity.jsonl" --scratch "$W/identity.runs" >"$OUT/identity.log" 2>&1
rc=$?
echo "== identity check (exit $rc, $(elapsed) s)"; cat "$OUT/identity.log"
[ "$rc" -le 1 ] || { echo "== stopped: the check did not run (exit $rc)"; exit "$rc"; }
python3 scripts/retire_differing.py "$FOLDER" "$OUT/identity.jsonl" >"$OUT/retire.log" 2>&1
rc=$?
echo "== retire (exit $rc)"; cat "$OUT/retire.log"
[ "$rc" -eq 0 ] || exit "$rc"
if grep -q "^retired " "$OUT/retire.log"; then
  bash scripts/edition_call.sh "$OUT/e" $(( $(left) - 5 )) method_a="$FOLDER"
  rc=$?
  echo "== rerun (exit $rc, $(elapsed) s)"
  exit "$rc"
fi
echo "== nothing to rerun: every configuration repeats its record ($(elapsed) s)"
