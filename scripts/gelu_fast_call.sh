#!/usr/bin/env bash
# One GPU call for float16 GELU within an ulp (gelu.cu's gelu_forward_f16_fast / gelu_backward_f16_fast,
# TR2_GELU_F16_FAST; docs/perf.md, "float16 GELU within an ulp"; written on the CPU machine; its steps 1-2 and the step
# were run by hand in calls 8-11 of results/h200-perf-20261204f, after which the fast form became the default (b89c830):
# since then step 4's variant `fast` equals this tree, so carry it as VARIANTS="fast=tree:TR2_GELU_F16_FAST=0" to time
# the computing kernels against the default, and read the ratio the other way round):
# scripts/gelu_seg_call.sh's four steps in its f16fast mode:
#   1. the GELU kernel tests (tests/test_kernels_gpu.py -k gelu: the fast kernels within an ulp of the computing
#      kernels on every f16 code, forward, backward times a dy set and every (x, dy) pair of codes, the specials
#      bit-equal; activations three times, graph replay, the switch; the table and segment tests beside them)
#   2. the microbenchmark (gelu_bench.py f16fast): nanogpt, gpt2-small, gpt2-medium at x ~ N(0, 1), nanogpt at N(0, 4)
#   3. Nsight Compute on one launch of each of the four kernels (nanogpt's shape)
#   4. the step beside PyTorch's reduce-overhead (variant fast against this tree) where 1 passed and nanogpt's fast
#      forward + backward took at most SEG_GATE (0.95) of the computing kernels'
# Carry: VARIANTS="fast=tree:TR2_GELU_F16_FAST=1" RECORD=<the products record> TR2_NVRTC=<libnvrtc.so.12> \
#          bash scripts/carry_prepare.sh;  run tool carry as gelu_seg_call.sh's
#   usage: TR2_GIT_COMMIT=<40 hex> bash scripts/gelu_fast_call.sh "$OUT"
GELU_CALL_MODE=f16fast exec bash "$(dirname "$0")/gelu_seg_call.sh" "$@"
