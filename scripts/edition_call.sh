#!/usr/bin/env bash
# One device call of a card run in pieces (the H200 edition: docs/h200-edition.md), on the GPU machine: each
# STAGE=TARGET runs `python3 -m tr2.runner STAGE --runs-only`, on a fresh folder where TARGET is a card's name and
# resuming it where TARGET is a results folder, one after another, all under one `timeout LIMIT_S`. Then the card's
# results folders that the call wrote in (CARD, from the targets or the folders' names) go back in OUT/results.tgz
# without their .npz and caches, so a stage the timeout stopped still comes back, with machine.txt, each stage's log and times.txt
# (stage, exit code, seconds; 124: stopped by the timeout; 75: stopped before a run the limit would cut); the
# script exits with the first stage's code that is not 0 (after packing), else 0. Notebooks are rendered afterwards
# on the CPU machine
# (`python -m tr2.runner STAGE --render DIR`).
#   usage: TR2_GIT_COMMIT=<the commit's 40-hex hash> bash scripts/edition_call.sh OUT LIMIT_S STAGE=TARGET ...
#   e.g.   bash scripts/edition_call.sh $OUT 560 method_a=results/method_a-20261202-170258-h200-edition
#   first, on the CPU machine: TR2_PREFLIGHT=1 TR2_GIT_COMMIT=... bash scripts/edition_call.sh OUT LIMIT_S STAGE=TARGET ...
#   (the arguments, each resumed folder's program and the carry checked; nothing run or written)
set -u -o pipefail
usage="usage: bash scripts/edition_call.sh OUT LIMIT_S STAGE=TARGET [STAGE=TARGET ...]"
[ $# -ge 3 ] || { echo "edition_call.sh: OUT, LIMIT_S and at least one STAGE=TARGET needed, $# argument(s) given; $usage" >&2; exit 2; }
OUT=$1 LIMIT_S=$2
shift 2
[[ $LIMIT_S =~ ^[0-9]+$ ]] && [ "$LIMIT_S" -ge 30 ] || { echo "edition_call.sh: LIMIT_S '$LIMIT_S' is not allowed; allowed: whole seconds, 30 or more" >&2; exit 2; }
cards=()
for spec in "$@"; do
  stage=${spec%%=*} target=${spec#*=} target=${target%/}
  case $stage in series|method_a|method_b|footprint|families) ;; *) echo "edition_call.sh: stage '$stage' in '$spec' is not allowed; allowed: series | method_a | method_b | footprint | families" >&2; exit 2;; esac
  [ -n "$target" ] && [ "$target" != "$spec" ] || { echo "edition_call.sh: '$spec' names no TARGET; allowed: STAGE=CARD (a fresh folder) or STAGE=results/FOLDER (resumed)" >&2; exit 2; }
  if [ -d "$target" ]; then
    cards+=("${target##*-[0-9][0-9][0-9][0-9][0-9][0-9]-}")   # results/STAGE-YYYYMMDD-HHMMSS-CARD
  elif [[ $target == */* ]]; then
    # a folder to resume that is not here (the slim tree left it out) would reach the runner as a card's name
    echo "edition_call.sh: '$target' in '$spec' is no folder here; allowed: STAGE=CARD (a fresh folder) or STAGE=results/FOLDER present in the tree (scripts/device_tree.sh slim keeps the folders it is given)" >&2; exit 2
  else
    cards+=("$target")
  fi
done
# TR2_PREFLIGHT=1, on the CPU machine before the device call: the checks below that need no GPU (the arguments, the
# program of each resumed folder, and the carry: scripts/carry_check.py), then exit 0 or the failed check's code,
# nothing run or written
preflight=${TR2_PREFLIGHT:-0}
case $preflight in 0|1) ;; *) echo "edition_call.sh: TR2_PREFLIGHT '$preflight' is not allowed; allowed: 1 (check only, on the CPU machine) or 0" >&2; exit 2;; esac
if [ "$preflight" = 1 ]; then
  export PYTHONPATH="$PWD/lib${PYTHONPATH:+:$PYTHONPATH}"
else
  source scripts/device_env.sh || exit 1
fi
# A resumed folder's runs are recorded at TR2_GIT_COMMIT, the caller's word. Where it names the commit the folder was
# begun at while lib/tr2 here is another program (a later session's lib, not restored for the call), the new runs
# would carry that commit's name over another program's times: refused in one line before anything runs. A resume at
# another commit (method A's refresh after tr2.retire) names that commit and passes. The rule is stage.program_conflict's
# (which every stage applies since 883a5be), written out here because a resume may run a lib/tr2 restored to a commit
# from before it (the series begun at 44e2bd9).
for spec in "$@"; do
  target=${spec#*=} target=${target%/}
  [ -d "$target" ] || continue
  python3 - "$target" <<'PY' || exit 2
import json, os, sys
from pathlib import Path
from tr2.sysinfo import lib_digest
folder = Path(sys.argv[1])
try:
    begun = json.loads((folder / "machine.json").read_text())
except (OSError, ValueError):
    sys.exit(0)   # nothing recorded to compare with (the stage says what is wrong with such a folder)
commit, recorded, claimed, here = begun.get("commit"), begun.get("lib_digest"), os.environ.get("TR2_GIT_COMMIT"), lib_digest()
same = claimed and commit and min(len(claimed), len(commit)) >= 7 and (claimed.startswith(commit) or commit.startswith(claimed))
if recorded and (same or claimed == commit) and here != recorded:
    print(f"edition_call.sh: {str(folder)!r} was begun at {commit[:12]} with lib/tr2 digest {recorded}, and TR2_GIT_COMMIT "
          f"names that commit while lib/tr2 here has digest {here}: its runs would carry {commit[:12]}'s name over another "
          f"program; allowed: lib/tr2 as at {commit[:12]} (git restore --source={commit[:12]} -- lib/tr2), or "
          "TR2_GIT_COMMIT naming the commit whose lib/tr2 is here", file=sys.stderr)
    sys.exit(1)
PY
done
if [ "$preflight" = 1 ]; then
  python3 scripts/carry_check.py $(printf '%s\n' "${cards[@]}" | sort -u) || exit 1
  echo "edition_call.sh: preflight passed (arguments, programs, carry); nothing run"
  exit 0
fi
call_begin "$OUT" "$LIMIT_S"
touch "$W/started"   # the archive takes the folders written in after this
# a stage starts no run that its measured runs (else, in a fresh folder, scripts/h200_minutes.py's model) say would end
# past the call's limit (10 s kept for packing): it stops with exit code 75 instead, and the next call resumes it
# (lib/tr2/stage.py, run_plan)
export TR2_DEADLINE=$(( CALL_START + LIMIT_S - 10 ))
# an H200 card where another GPU came (the device tool lends H100s too) stops in one line before any run, rather than
# spend the call timing the wrong card (lib/tr2/cards.py, check_machine)
export TR2_REQUIRE_CARD_GPU=1
# and a cupy run without its card's products record stops (the stage before its first run, each run at its backend)
# rather than time cuBLASLt's heuristic choices as the edition's program (lib/tr2/cupy_side/products.py, required)
export TR2_REQUIRE_PRODUCTS=1
for spec in "$@"; do
  stage=${spec%%=*} target=${spec#*=} target=${target%/}
  left_s=$(left)
  if [ "$left_s" -le 20 ]; then
    echo "$stage skipped 0 s (no time left)" | tee -a "$OUT/times.txt"
    first_rc=${first_rc:-124}
    continue
  fi
  t0=$(date +%s)
  if [ -d "$target" ]; then what=(--resume "$target"); else what=(--card "$target"); fi
  timeout "$left_s" python3 -m tr2.runner "$stage" "${what[@]}" --runs-only >"$OUT/$stage.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || [ "${first_rc:-0}" -ne 0 ] || first_rc=$rc
  echo "$stage rc $rc $(( $(date +%s) - t0 )) s" | tee -a "$OUT/times.txt"
done
# only the card's folders this call wrote in: an archive holding every folder of the card carried stale copies of
# folders a later call had extended, which overwrote them when the archives were unpacked out of order (the
# fifty-ninth session: call 3's copy of the series folder undid call 2's last runs)
folders=()
for c in $(printf '%s\n' "${cards[@]}" | sort -u); do
  for f in $(ls -d results/*-[0-9]*-[0-9]*-"$c" 2>/dev/null); do
    [ -n "$(find "$f" -newer "$W/started" -print -quit)" ] && folders+=("$f")
  done
done
if [ "${#folders[@]}" -gt 0 ]; then
  tar czf "$OUT/results.tgz" --exclude='*.npz' --exclude='*/cache' "${folders[@]}"
  echo "results.tgz: ${folders[*]}"
else
  echo "results.tgz: not written (no folder of the card was written in by this call)"
fi
for spec in "$@"; do tail -c 600 "$OUT/${spec%%=*}.log" 2>/dev/null; echo; done
cat "$OUT/times.txt"
out_fold "$OUT"   # more than 8 files (many stages' logs) would not all come back
exit "${first_rc:-0}"   # the first stage's exit code that was not 0 (124: the timeout; 75: the deadline), else 0
