#!/usr/bin/env bash
# Nsight Compute's source view of one kernel launch (on the GPU machine): executed instructions and warp-stall samples
# per SASS line, for scripts/sass_dynamic.py. The launch is the SKIP+1-th of those matching KERNEL (a regex), in the
# command given after `--`; the report's source page goes to OUT/NAME-sass.csv.gz, the report itself to
# OUT/NAME.ncu-rep only where it is under 8 MB (ours with its nine thousand SASS lines is ~18 MB).
#   usage: bash scripts/source_view.sh OUT NAME KERNEL SKIP LIMIT_S -- python3 scripts/attention_ncu.py gpt2-small
#   e.g.   bash scripts/source_view.sh $OUT bwd-ours 'attn_backward_dkdv' 1 60 -- python3 scripts/attention_ncu.py gpt2-small
set -u -o pipefail
[ $# -ge 7 ] && [ "$6" = "--" ] || { echo "usage: bash scripts/source_view.sh OUT NAME KERNEL SKIP LIMIT_S -- COMMAND..." >&2; exit 2; }
out=$1 name=$2 kernel=$3 skip=$4 limit=$5
shift 6
[[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "source_view.sh: NAME '$name': letters, digits, '.', '_' and '-' only" >&2; exit 2; }
[[ $skip =~ ^[0-9]+$ && $limit =~ ^[0-9]+$ ]] || { echo "source_view.sh: SKIP '$skip' and LIMIT_S '$limit' must be whole numbers" >&2; exit 2; }
mkdir -p "$out"
timeout "$limit" ncu --clock-control none -k "regex:$kernel" --launch-skip "$skip" --launch-count 1 \
  --section SourceCounters --section InstructionStats --section WarpStateStats -f -o "$out/$name" "$@" \
  >"$out/$name.log" 2>&1
rc=$?
echo "== source view $name (exit $rc)"
[ -f "$out/$name.ncu-rep" ] || exit "$((rc ? rc : 1))"
ncu -i "$out/$name.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip >"$out/$name-sass.csv.gz"
ncu -i "$out/$name.ncu-rep" --page details 2>&1 | grep -E "^  [A-Za-z_]|Executed Instructions  " | head -4
[ "$(stat -c %s "$out/$name.ncu-rep")" -lt 8000000 ] || rm "$out/$name.ncu-rep"
exit "$rc"
