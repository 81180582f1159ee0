#!/usr/bin/env bash
# One GPU call for two measurements the twenty-eighth session built after its device time (docs/perf.md "Next, in
# order (after the twenty-eighth session)", items 1 and 2):
#   1. the energy counter's resolution (scripts/probes/energy_counter_probe.py, ~15 s): how often it changes under a
#      steady load and what that costs windows of 0.5-4 s read at their ends (the joules rule for marked windows)
#   2. the idle time between kernels of gpt2-small bf16, ours (graph, half roundings) and PyTorch's reduce-overhead,
#      each under torch.profiler over steps 101-130 (tr2.profile_run's gaps: span, busy, idle, the kernel pairs around
#      the waits), printed by scripts/gaps_table.py
# Carry data, .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT.
#   usage: TR2_GIT_COMMIT=<40 hex> bash scripts/gaps_energy_call.sh OUT     (GE_CALL_S, default 400)
set -u -o pipefail
OUT=${1:?OUT}
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${GE_CALL_S:-400}"
timeout 60 python3 scripts/probes/energy_counter_probe.py "$OUT/energy.json" 8 >"$OUT/energy.log" 2>&1
echo "== energy counter (exit $?, $(elapsed) s)"; cat "$OUT/energy.log"
common=(--window 100 130 --model "${GE_MODEL:-gpt2-small}" --dtype bfloat16 --device cuda --steps 130 --seed 1337
        --eval-interval 0 --log-interval 10)
timeout 150 python3 -m tr2.profile_run "${common[@]}" --out "$W/cupy" --side cupy --half-roundings --cuda-graph \
  >"$OUT/profile-cupy.log" 2>&1
echo "== profile, cupy (exit $?, $(elapsed) s)"; cp "$W/cupy/profile.json" "$OUT/profile-cupy.json" 2>/dev/null
[ "$(left)" -gt 170 ] && timeout $(( $(left) - 15 )) python3 -m tr2.profile_run "${common[@]}" --out "$W/torch" \
  --side torch --mode reduce-overhead >"$OUT/profile-torch.log" 2>&1
echo "== profile, torch reduce-overhead (exit $?, $(elapsed) s)"; cp "$W/torch/profile.json" "$OUT/profile-torch.json" 2>/dev/null
python3 scripts/gaps_table.py "$OUT"/profile-*.json --top 12
echo "== done ($(elapsed) s)"
out_fold "$OUT"
