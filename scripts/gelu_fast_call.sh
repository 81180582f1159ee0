#!/usr/bin/env bash
# One GPU call for float16 GELU within an ulp (gelu.cu's gelu_forward_f16_fast / gelu_backward_f16_fast,
# TR2_GELU_F16_FAST; docs/perf.md, "float16 GELU within an ulp"; written on the CPU machine; its steps 1-2 and the step
# were run by hand in calls 8-11 of results/h200-perf-20261204f, after which the fast form became the default (b89c830):
# since then step 4's variant `fast` equals this tree, so carry it as VARIANTS="fast=tree:TR2_GELU_F16_FAST=0" to time
# the computing kernels against the default, and read the ratio the other way round):
#   1. the GELU kernel tests (tests/test_kernels_gpu.py -k gelu: the fast kernels within an ulp of the computing
#      kernels on every f16 code, forward, backward times a dy set and every (x, dy) pair of codes, the specials
#      bit-equal; activations three times, graph replay, the switch; the bf16 table tests beside them), under their own
#      limit
#   2. the microbenchmark (scripts/gelu_bench.py, mode f16fast): fast against computing kernels on the c_fc shapes of
#      nanogpt, gpt2-small and gpt2-medium (x ~ N(0, 1)), then nanogpt with x ~ N(0, 4) (GELU_BENCH_SCALE=2: the
#      computing path's share); within an ulp first, then µs a launch in graphs, forms alternating over rounds
#   3. Nsight Compute (--clock-control none) on one launch of each of the four kernels (nanogpt's shape, the bench's
#      check): time, DRAM throughput and bytes, instructions an element (thread instructions / 25.2 M), issue slots
#      busy, local loads, registers, achieved occupancy
#   4. the step beside PyTorch's reduce-overhead (side_call.sh's bench: the variant fast against this tree), where 1
#      passed and, on nanogpt, fast forward + backward took at most FAST_GATE (0.95) of the computing kernels' time
# (Until 2026-12-05 this call was scripts/gelu_seg_call.sh in its f16fast mode; its f16seg mode went with float16 GELU
# by segment: gelu.cu's header.)
# Carry (prepared on the CPU machine at the commit to run, NVRTC found by TR2_NVRTC):
#   VARIANTS="fast=tree:TR2_GELU_F16_FAST=1" RECORD=<the products record> TR2_NVRTC=<libnvrtc.so.12> \
#     bash scripts/carry_prepare.sh
#   run tool carry: ["data", ".cache/kernels.tar.xz", ".cache/products", ".cache/nanoGPT", ".cache/variants"]
#   usage: TR2_GIT_COMMIT=<40 hex> bash scripts/gelu_fast_call.sh "$OUT"   (FAST_CALL_S, default 470: the call's seconds)
set -u -o pipefail
OUT=${1:?OUT}
MODE=f16fast NAME=fast FORM=fast
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${FAST_CALL_S:-470}"
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py -k gelu >"$OUT/pytest_gelu.log" 2>&1
tests=$?
echo "== gelu kernel tests (exit $tests, $(elapsed) s)"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_gelu.log" | head; tail -2 "$OUT/pytest_gelu.log"
timeout 150 python3 scripts/gelu_bench.py "$W/${NAME}_bench.jsonl" 3 20 nanogpt,gpt2-small,gpt2-medium "$MODE" \
  >"$W/${NAME}_bench.log" 2>&1
echo "== f16 gelu $MODE, x ~ N(0, 1) (exit $?, $(elapsed) s)"; cat "$W/${NAME}_bench.log" | tail -4
GELU_BENCH_SCALE=2 timeout 60 python3 scripts/gelu_bench.py "$W/${NAME}_bench_s2.jsonl" 3 20 nanogpt "$MODE" \
  >"$W/${NAME}_bench_s2.log" 2>&1
echo "== f16 gelu $MODE, x ~ N(0, 4) (exit $?, $(elapsed) s)"; tail -1 "$W/${NAME}_bench_s2.log"
if [ "$(left)" -gt 150 ]; then
  # the bench's check launches fast forward, backward, then computing forward, backward: the first four
  TR2_VARIANT_TIMING=eager timeout 120 ncu --clock-control none -k regex:^gelu_ --launch-count 4 \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,smsp__thread_inst_executed.sum,smsp__inst_executed.sum,sm__inst_issued.avg.pct_of_peak_sustained_active,smsp__sass_inst_executed_op_local_ld.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
    python3 scripts/gelu_bench.py "$W/ncu_bench.jsonl" 1 1 nanogpt "$MODE" >"$W/ncu-gelu-$NAME.txt" 2>&1
  echo "== ncu, nanogpt f16 (exit $?, $(elapsed) s)"
  grep -E "^  gelu_|gpu__time|dram__|inst_|local_ld|registers|warps_active" "$W/ncu-gelu-$NAME.txt" | head -48
fi
# the gate: nanogpt's fast forward + backward against the computing kernels' (gelu_bench's jsonl; its check passed:
# within an ulp)
ratio=$(python3 -c "import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
r = [x for x in r if x['model'] == 'nanogpt' and x.get('within_an_ulp', x['bits_equal'])]
f = sys.argv[2]
print('%.4f' % ((r[0][f'forward_{f}_us'] + r[0][f'backward_{f}_us'])
                / (r[0]['forward_compute_us'] + r[0]['backward_compute_us'])) if r else '')" \
  "$W/${NAME}_bench.jsonl" "$FORM" 2>/dev/null)
echo "== nanogpt $FORM / computing, forward + backward: ${ratio:-none} (gate ${FAST_GATE:-0.95})"
if [ "$tests" -eq 0 ] && [ -n "$ratio" ] && awk -v r="$ratio" -v g="${FAST_GATE:-0.95}" 'BEGIN{exit !(r <= g)}'; then
  SIDE_CALL_S=$(( $(left) - ${FAST_AFTER_S:-15} )) SIDE_STAGES=bench SIDE_LIBS=$NAME=.cache/variants/$NAME/lib \
    SIDE_TORCH=reduce-overhead SIDE_SELECT=${FAST_SELECT:-nanogpt/float16,gpt2-small/float16} \
    SIDE_ROUNDS=${FAST_ROUNDS:-2} bash scripts/side_call.sh "$OUT/side"
else
  echo "== step bench skipped (tests exit $tests, ratio ${ratio:-none})"
fi
(cd "$W" && tar czf "$OUT/gelu_$NAME.tgz" "$NAME"_bench*.log "$NAME"_bench*.jsonl "ncu-gelu-$NAME.txt" 2>/dev/null)
echo "== done ($(elapsed) s)"
out_fold "$OUT"
