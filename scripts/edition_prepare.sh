#!/usr/bin/env bash
# The H200 edition's next device call prepared on the CPU machine in one command: the steps docs/h200-edition.md
# lists, in its order, stopping at the first that fails (each step's own message says why). Why: done by hand they
# went wrong unseen once (the sixty-seventh session's carry lacked the H200's products record).
#   1. lib/tr2 as committed at EDITION_COMMIT (default 44e2bd9, the program the series of the sixty-fifth session was
#      begun with; the working tree only, nothing committed): a resumed folder's new runs must be its program
#   2. the carry: scripts/carry_prepare.sh with RECORD (default results/h100-perf-20261205g/record, both cards'
#      products records), so the cubins of step 1's kernel sources
#   3. the tree slimmed for the run tool's 64 MiB: scripts/device_tree.sh slim, RECORD and each resumed folder kept
#   4. the preflight: TR2_PREFLIGHT=1 scripts/edition_call.sh with these arguments (the arguments, each resumed
#      folder's program against its machine.json, the carry); it prints "preflight passed"
# Then the device call's command line, and what undoes steps 1 and 3 after it.
#   usage: bash scripts/edition_prepare.sh LIMIT_S STAGE=TARGET ...     (EDITION_COMMIT, RECORD; TR2_NVRTC: NVRTC)
#   e.g.   bash scripts/edition_prepare.sh 545 series=results/series-20261207-195207-h200-edition families=h200-edition
# Refused before anything changes: fewer than two arguments, a LIMIT_S edition_call.sh would refuse, an EDITION_COMMIT
# or RECORD that is not here, changes under lib/ not committed (step 1 would overwrite them).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "edition_prepare.sh: LIMIT_S and at least one STAGE=TARGET needed, $# argument(s) given; usage: bash scripts/edition_prepare.sh LIMIT_S STAGE=TARGET ..." >&2; exit 2; }
# edition_call.sh's own rule for LIMIT_S, asked here too: its preflight comes last, after the tree has changed
[[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge 30 ] || { echo "edition_prepare.sh: LIMIT_S '$1' is not allowed; allowed: whole seconds, 30 or more" >&2; exit 2; }
name=${EDITION_COMMIT:-44e2bd9}
COMMIT=$(git rev-parse --verify -q "$name^{commit}") || { echo "edition_prepare.sh: EDITION_COMMIT '$name' is no commit here" >&2; exit 2; }
RECORD=${RECORD:-results/h100-perf-20261205g/record}
[ -d "$RECORD" ] || { echo "edition_prepare.sh: RECORD '$RECORD' is no folder here (a results/ folder holding the products records; scripts/device_tree.sh full if the tree is slim)" >&2; exit 2; }
dirty=$(git status --porcelain -- lib)
if [ -n "$dirty" ]; then
  echo "edition_prepare.sh: changes under lib/ not committed (step 1 restores lib/tr2 over them; commit or stash them first):" >&2
  echo "$dirty" | head -5 >&2
  exit 2
fi
keep=("$RECORD")
for spec in "${@:2}"; do
  t=${spec#*=} t=${t%/}
  [[ $t == results/* ]] && keep+=("$t")
done
echo "== 1. lib/tr2 as at $COMMIT"
# from here a step that fails leaves lib/tr2 (and perhaps the tree's sparse checkout) changed: say how to undo it
trap 'echo "edition_prepare.sh: stopped; to undo: git restore --source=HEAD -- lib/tr2; bash scripts/device_tree.sh full" >&2' EXIT
git restore --source="$COMMIT" -- lib/tr2
echo "lib digest $(PYTHONPATH=lib python3 -m tr2.sysinfo lib-digest) (as at $name: $(PYTHONPATH=lib python3 -m tr2.sysinfo lib-digest "$COMMIT"))"
echo "== 2. the carry"
RECORD="$RECORD" bash scripts/carry_prepare.sh
echo "== 3. the tree slimmed"
bash scripts/device_tree.sh slim "${keep[@]}"
echo "== 4. the preflight"
TR2_PREFLIGHT=1 TR2_GIT_COMMIT="$COMMIT" bash scripts/edition_call.sh /tmp/edition-preflight-out "$@"
trap - EXIT
cat <<TXT
== prepared. The device call (kind nvidia-h200; carry: the list step 2 printed, scripts/carry_prepare.sh's):
nvidia-smi -L | grep -q H200 || { nvidia-smi -L; echo NOT H200; exit 3; }; TR2_GIT_COMMIT=$COMMIT bash scripts/edition_call.sh \$OUT/e $*
After it, on this machine: git restore --source=HEAD -- lib/tr2; bash scripts/device_tree.sh full
TXT
