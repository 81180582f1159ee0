#!/usr/bin/env bash
# The quick card on the GPU machine (the device tool's copy of the repo, no network): every stage of CARD
# (default h200-quick) through tr2.runner, then the report, as `make all CARD=...` runs them where a .venv
# can be set up. Carry: .whl (../shared/wheels/device), .cache/kernels, .cache/products (scripts/carry_prepare.sh: a
# GPU stage stops before its first run without this GPU's record), .cache/nanoGPT (a copy of the
# nanoGPT checkout, put where the card's default nanogpt_path looks: ../shared/nanoGPT), data.
# Writes under OUT after each stage: machine.txt, times.txt (stage, exit code, seconds), logs.tgz and
# results.tgz (the card's results folders without .npz, and the report), so a call stopped at its limit
# returns every finished stage; a stopped stage resumes with `python3 -m tr2.runner STAGE --resume DIR`.
# QUICK_RUNS_ONLY=1: each stage's runs and summary only (tr2.runner --runs-only), no notebook and no report, so that no
# .whl need travel (the tree and the wheels together pass the device tool's 64 MiB); render the folders afterwards on
# the CPU machine with `python -m tr2.runner STAGE --render DIR`, then `python -m tr2.report --card CARD`.
#   usage: bash scripts/quick_call.sh OUT [CARD]
set -u -o pipefail
OUT=$1
CARD=${2:-h200-quick}
source scripts/device_env.sh || exit 1
export TR2_KERNEL_CACHE="$PWD/.cache/kernels"
W=$(mktemp -d)
mkdir -p "$OUT" "$W/logs"
machine_record "$OUT/machine.txt"
pack() {
  tar czf "$OUT/logs.tgz" -C "$W" logs
  tar czf "$OUT/results.tgz" --exclude='*.npz' $(ls -d results/*-"$CARD" 2>/dev/null) $(ls report/*"$CARD"* 2>/dev/null)
}
for stage in series method_a method_b footprint families; do
  t0=$(date +%s)
  python3 -m tr2.runner "$stage" --card "$CARD" ${QUICK_RUNS_ONLY:+--runs-only} >"$W/logs/$stage.log" 2>&1
  rc=$?
  echo "$stage rc $rc $(( $(date +%s) - t0 )) s" | tee -a "$OUT/times.txt"
  pack
done
[ -n "${QUICK_RUNS_ONLY:-}" ] && { tail -n 3 "$W"/logs/*.log; exit 0; }
t0=$(date +%s)
python3 -m tr2.report --card "$CARD" --out "report/TR-2-$CARD.html" >"$W/logs/report.log" 2>&1
echo "report rc $? $(( $(date +%s) - t0 )) s" | tee -a "$OUT/times.txt"
pack
tail -n 3 "$W"/logs/*.log
