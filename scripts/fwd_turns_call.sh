#!/usr/bin/env bash
# One GPU call for the twenty-sixth session's attention changes (docs/perf.md, "Twenty-sixth session"): the
# descriptors once a tile (tma_forward_tile, tma_dkdv_tile, tma_dq_step) and the forward's edge mask, each at the bits
# of before, and form 8 (tmawrt, form 7 with turns at the exponentials):
#   1. tests (scripts/side_call.sh's tests stage): form 7's whole-run graph test against form 3 and form 8's against
#      form 7; the 128-key TMA kernel cases of forms 3 and 7, the plain test_attention cases at T = 1000 and 1024
#      (the default forward there), the TMA dK/dV forms that share tma_dkdv_tile (tma, tma3, tmar, tmarr) against the
#      plain kernel's bits and the TMA dQ against the mma.sync dQ's; form 8's kernel cases apart, under their own limit
#      (a hang stops only them), with its turns across a block's items (`turns_across_items`)
#   0. first, the old program's tmawr alone (the variant `base`, the commit before the changes, with mma.sync as
#      every table's reference), so that it is timed whatever the tests take
#   2. the forward's forms alone (fwd stage: tmaw, tmawr and, where its tests passed, tmawrt), in the same call as 0
#      so that the ratios compare
#   3. with what is left, Nsight Compute's source view (scripts/source_view.sh) of form 8's forward where it passed,
#      and of the backward: our dK/dV and dQ kernels and cuDNN's bprop, gpt2-small bf16
# Carry data, .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT, .cache/variants (base = the commit before).
#   usage: TR2_GIT_COMMIT=<commit> bash scripts/fwd_turns_call.sh OUT     (TURNS_CALL_S, default 560)
set -u -o pipefail
OUT=${1:?OUT}
source scripts/device_env.sh || exit 1
use_carried_caches
# device_env's `left` and `elapsed` count from here (side_call.sh below records the machine in OUT/side)
CALL_START=$(date +%s) CALL_LIMIT_S=${TURNS_CALL_S:-560}
mkdir -p "$OUT/sv"
PYTHONPATH=$PWD/.cache/variants/base/lib TR2_FWD_VARIANTS=tmawr timeout 90 python3 \
  scripts/attention_forward_variants.py "$OUT/fwd-base.jsonl" 3 20 >"$OUT/fwd-base.log" 2>&1
echo "== the old program's tmawr alone, first (exit $?, $(left) s left)"; tail -6 "$OUT/fwd-base.log"
TR2_FWD_VARIANTS=tmaw,tmawr,tmawrt SIDE_CALL_S=$(( $(left) - 120 )) SIDE_STAGES=tests,fwd \
  SIDE_TESTS="(tma_wide and not tmawp and not tmaw3 and not tmawrt) or (test_attention and not test_attention_ and (1000 or 1024)) or dkdv_tma_on or (dkdv_tma_forms and (tma3 or tmar)) or dq_tma_on" \
  SIDE_TESTS_S=240 SIDE_TESTS_LATE="(tma_wide and tmawrt) or turns_across_items" SIDE_TESTS_LATE_S=120 \
  SIDE_GRAPH_TESTS="resident_attention and forward" SIDE_GRAPH_TESTS_S=150 bash scripts/side_call.sh "$OUT/side"
if [ "$(left)" -gt 60 ] && tar xzOf "$OUT/side/logs.tgz" pytest_late.log 2>/dev/null | tail -1 | grep -q " passed" \
   && ! tar xzOf "$OUT/side/logs.tgz" pytest_late.log | grep -qE "failed|error"; then
  TR2_ATTN_FWD_TMA_LONG=8 bash scripts/source_view.sh "$OUT/sv" fwd-tmawrt attn_forward 1 50 -- \
    python3 scripts/attention_ncu.py gpt2-small bfloat16 1
fi
[ "$(left)" -gt 60 ] && bash scripts/source_view.sh "$OUT/sv" bwd-dkdv attn_backward_dkdv 1 50 -- \
  python3 scripts/attention_ncu.py gpt2-small bfloat16 1
[ "$(left)" -gt 60 ] && bash scripts/source_view.sh "$OUT/sv" bwd-cudnn bprop 1 50 -- \
  python3 scripts/sdpa_ncu.py gpt2-small bfloat16
[ "$(left)" -gt 60 ] && bash scripts/source_view.sh "$OUT/sv" bwd-dq attn_backward_dq 1 50 -- \
  python3 scripts/attention_ncu.py gpt2-small bfloat16 1
echo "== done ($(left) s left)"
out_fold "$OUT"
