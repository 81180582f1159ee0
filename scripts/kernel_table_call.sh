#!/usr/bin/env bash
# One GPU call for issue 8's kernel table and the bench's medians:
#   profiles  torch.profiler over steps 101-130 (tr2.profile_run, as the families stage runs it) of the cupy side
#             (graph, half roundings) and our torch loop in reduce-overhead, for KT_MODELS (default nanogpt,gpt2-small)
#             in bfloat16; each torch run compiles into caches of its own (configs.compile_caches); then the
#             kernels grouped by params/families.tsv, attention's kernels named (scripts/kernel_table.py)
#   bench     scripts/device_bench.py: the cupy graph against KT_TORCH (default reduce-overhead), KT_ROUNDS rounds
#             (default 3, rotating order), KT_SELECT configurations; gets what is left of the call
# Carry data, .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT.
#   usage: bash scripts/kernel_table_call.sh OUT      KT_CALL_S: seconds the call may take (default 540)
set -u -o pipefail
OUT=${1:-${OUT:-$PWD/kernel-table-out}}
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${KT_CALL_S:-540}"
mkdir -p "$W/profiles"   # packed into OUT/profiles.tgz at the end: the device tool returns at most 8 files
for model in ${KT_MODELS:-nanogpt gpt2-small}; do
  for side in cupy torch; do
    slug="$model-bfloat16-$side"
    if [ "$side" = cupy ]; then extra=(--side cupy --half-roundings --cuda-graph); else extra=(--side torch --mode reduce-overhead); fi
    TORCHINDUCTOR_CACHE_DIR="$W/cache/$slug/inductor" TRITON_CACHE_DIR="$W/cache/$slug/triton" \
      timeout 200 python3 -m tr2.profile_run --window 100 130 --out "$W/prof/$slug" --model "$model" --dtype bfloat16 \
      --device cuda --steps 130 --seed 1337 --eval-interval 0 --log-interval 10 "${extra[@]}" >"$W/prof-$slug.log" 2>&1
    echo "== profile $slug (exit $?, $(elapsed) s)"
    cp "$W/prof/$slug/profile.json" "$W/profiles/$slug.json" 2>/dev/null
  done
done
python3 scripts/kernel_table.py "$W/profiles" | tee "$OUT/kernel_table.txt"
cp "$W/kernel_table.csv" "$OUT/" 2>/dev/null
(cd "$W" && tar czf "$OUT/profiles.tgz" profiles)
L=$(left)
if [ "$L" -gt 90 ]; then
  TR2_BENCH_ROUNDS=${KT_ROUNDS:-3} TR2_BENCH_CUPY=graph TR2_BENCH_TORCH_MODES=${KT_TORCH:-reduce-overhead} \
    TR2_BENCH_SELECT=${KT_SELECT:-nanogpt/bfloat16,gpt2-small/bfloat16,gpt2-medium/bfloat16} \
    timeout "$L" python3 scripts/device_bench.py "$W/bench" "bench:$((L - 15))" >"$W/bench.log" 2>&1
  echo "== bench"; tail -8 "$W/bench.log"
fi
(cd "$W" && tar czf "$OUT/logs.tgz" $(ls -d *.log bench 2>/dev/null))
