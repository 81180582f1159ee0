#!/usr/bin/env bash
# One GPU call: PyTorch's max-autotune mode timed on the H200 for the first time, beside reduce-overhead and the cupy
# side's graph, by the bench's outside clock (steps 100-400, the same runs as side_call.sh's bench). Why: the H200
# edition compares against reduce-overhead alone, and a sceptic's first question is whether max-autotune, which the
# full card h200.yaml times and the edition left out for its compile time (h200.yaml's comment: 320 s for the char
# model, no committed log), is PyTorch's fastest mode there (report/TR-2-h200.html, "Not timed here").
#   Each configuration compiles into caches of its own (device_bench.py); the first round's max-autotune run is a
#   cold compile (its wall_s in bench.jsonl, less its 400 steps, is the compile time the minutes model lacks), later
#   rounds in the same call reuse the cache. AT_SELECT (default gpt2-small/bfloat16), AT_MODES (default
#   reduce-overhead,max-autotune; add default with AT_SELECT=nanogpt/float32,gpt2-small/float32 for the other gap the
#   report names: default mode never timed in float32), AT_ROUNDS (default 1: a cold compile of unknown length
#   first), AT_CALL_S (default 560).
# Carry: data, .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT (scripts/carry_prepare.sh, no variants needed).
#   usage: TR2_GIT_COMMIT=<40 hex> bash scripts/autotune_call.sh OUT
set -u -o pipefail
OUT=${1:?OUT}
SIDE_CALL_S=${AT_CALL_S:-560} SIDE_STAGES=bench SIDE_LIBS= SIDE_TORCH=${AT_MODES:-reduce-overhead,max-autotune} \
  SIDE_SELECT=${AT_SELECT:-gpt2-small/bfloat16} SIDE_ROUNDS=${AT_ROUNDS:-1} bash scripts/side_call.sh "$OUT"
