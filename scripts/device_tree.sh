#!/usr/bin/env bash
# What of the checkout travels to the device machine. The run tool copies the tracked files present in the working
# tree, the untracked ones git does not ignore, and the carried paths, 64 MiB in all; the committed raw output under
# results/ (50 MB on 2026-12-04) and report/ (4 MB) left a 6 MB carry over that limit (the twenty-ninth session's
# first call was refused). No call reads them, except the few folders a call names (an identity check's method A
# folder, a series folder it resumes): those are kept.
#   scripts/device_tree.sh slim [PATH...]   a sparse checkout without results/ and report/, the PATHs kept (folders
#                                           or files under them) and scripts/h200_minutes.py's sources; commit or
#                                           stash what changed there first
#   scripts/device_tree.sh full             the whole tree back (before committing anything under results/)
#   scripts/device_tree.sh size [CARRY...]  the bytes that would travel now, with these carried paths
# A sparse checkout changes nothing committed: `git status` stays clean, and `full` restores every file.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=$((64 * 1024 * 1024))

travel_bytes() {   # tracked files present + untracked not ignored + the carried paths, each counted as a tar archive
  # holds it (a 512-byte header, the content in 512-byte blocks): the run tool refused 61.2 MiB of content that came
  # to 64.2 MiB so counted (3947 files), so this is the measure it applies, or near it; a carried path that
  # git does not ignore is counted once
  { git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
      [ -f "$f" ] && printf '%s\0' "$f"; done
    for c in "$@"; do [ -e "$c" ] && find "$c" -type f -print0; done
  } | sort -zu | xargs -0 -r stat -c %s | awk '{ t += 512 + int(($1 + 511) / 512) * 512 } END { printf "%d\n", t }'
}

case "${1:-}" in
  slim)
    shift
    dirty=$(git status --porcelain -- results report)
    if [ -n "$dirty" ]; then
      echo "device_tree: changes under results/ or report/ (commit or stash them first):" >&2
      echo "$dirty" | head -5 >&2
      exit 2
    fi
    patterns=('/*' '!/results/' '!/report/')
    # the committed runs scripts/h200_minutes.py models a fresh folder's runs from (3.5 MB): without them a stage on
    # the device starts its first run of each kind with no estimate for TR2_DEADLINE to judge (found 2026-12-04)
    py=python3; [ -x .venv/bin/python ] && py=.venv/bin/python
    mapfile -t model_sources < <(PYTHONPATH=lib "$py" scripts/h200_minutes.py sources)
    [ "${#model_sources[@]}" -gt 0 ] || { echo "device_tree: scripts/h200_minutes.py sources listed nothing" >&2; exit 2; }
    for p in "${model_sources[@]}"; do patterns+=("/$p"); done
    for p in "$@"; do
      p=${p%/}
      case "$p" in
        results/*|report/*) ;;
        *) echo "device_tree: '$p' is not under results/ or report/ (everything else travels anyway)" >&2; exit 2 ;;
      esac
      git ls-files --error-unmatch -- "$p" >/dev/null 2>&1 || { echo "device_tree: '$p' holds no tracked file" >&2; exit 2; }
      patterns+=("/$p")
    done
    git sparse-checkout set --no-cone "${patterns[@]}"
    echo "device_tree: slim ($(( $(travel_bytes) / 1024 / 1024 )) MiB tracked and untracked travel; kept: ${*:-nothing else under results/ or report/} and the ${#model_sources[@]} sources of scripts/h200_minutes.py)"
    ;;
  full)
    git sparse-checkout disable
    echo "device_tree: full ($(( $(travel_bytes) / 1024 / 1024 )) MiB)"
    ;;
  size)
    shift
    b=$(travel_bytes "$@")
    echo "device_tree: $b bytes ($(( b / 1024 / 1024 )) MiB) would travel, limit $LIMIT ($(( LIMIT / 1024 / 1024 )) MiB)"
    [ "$b" -le "$LIMIT" ] || exit 1
    ;;
  *)
    echo "usage: scripts/device_tree.sh slim [PATH...] | full | size [CARRY...]" >&2
    exit 2
    ;;
esac
