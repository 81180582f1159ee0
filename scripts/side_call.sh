#!/usr/bin/env bash
# One GPU call of stages (first written for the side stream, gpu/streams.py, removed since: gpu.RETIRED's
# TR2_SIDE_STREAM; and the graph-timed products record, products.py --timing graph).
#   records  the carried record (eager-timed) moves to .cache/products-eager; this tree's record is rebuilt, timed in
#            graphs, for SIDE_MODELS in bf16r
#   tests    test_graph_gpu (graph = eager loop; SIDE_GRAPH_TESTS a -k expression) and the kernel tests of SIDE_TESTS (a
#            pytest -k expression; default the products'; SIDE_GRAPH_TESTS_S and SIDE_TESTS_S their limits, default
#            300 and 240 s), then those of SIDE_TESTS_LATE apart, under
#            SIDE_TESTS_LATE_S seconds (default 150): a kernel that hangs stops only them
#   gelu     scripts/gelu_bench.py: bf16 GELU by table against the computing kernels (bits, then time)
#   bench    graph runs, one round each, bf16: this tree (as it runs by default; TR2_BENCH_CUPY_ENV its runs'
#            environment) against .cache/baseline (the previous main with its eager-timed record): SIDE_SELECT,
#            SIDE_ROUNDS rounds; SIDE_LIBS the variants instead, SIDE_TORCH the torch modes beside (default none);
#            SIDE_AFTER_BENCH_S seconds kept back for the stage after it
#   variants scripts/attention_backward_variants.py: the backward's forms (recompute, the mma.sync ds_l2, the fold, the
#            TMA dK/dV with each dQ; TR2_BWD_FORMS limits them) in one process
#   fwd      scripts/attention_forward_variants.py: the forward's kernels (mma.sync, wgmma, the TMA forward resident;
#            TR2_FWD_VARIANTS limits them) in one process, before the bench; where the late tests failed, the TMA
#            forms are left out
#   ncu      Nsight Compute on the attention kernels of one forward and backward (scripts/attention_ncu.py, every
#            kernel of its second pass, between cudaProfilerStart and Stop: the half builds' forward, row dots, dK/dV
#            and dQ, the float32 builds' forward, dQ and dK/dV) for each MODEL:DTYPE:HR[:VARIANT] of SIDE_NCU (default
#            gpt2-small:bfloat16:1); VARIANT names .cache/variants/VARIANT, whose bench.env
#            sets the run's environment (its lib is not used: the kernels are this tree's); VARIANT cudnn profiles
#            PyTorch's cuDNN attention at the shape instead (scripts/sdpa_ncu.py). Speed of light, pipes,
#            stalls, occupancy, shared-memory bank conflicts, the memory workload; ncu-MODEL-DTYPE-HR[-VARIANT].txt;
#            SIDE_NCU_FLAGS more of ncu's options (e.g. --cache-control none --replay-mode application)
#   sv       Nsight Compute's source view (scripts/source_view.sh: executed instructions and stall samples a SASS line)
#            of one launch of each MODEL:DTYPE:HR:KERNEL[:VARIANT] of SIDE_SV (default gpt2-small:float32:0:
#            attn_backward_dq_wgf), KERNEL a regex, its launch in attention_ncu.py's second pass; VARIANT's lib and
#            bench.env are used (.cache/variants/VARIANT); the pages in W/sv/NAME-sass.csv.gz (into logs.tgz), each
#            read by scripts/sass_dynamic.py --runs 3 (where the kernel waits, prologue, loop and end apart)
#   epilogue scripts/probes/gelu_epilogue_probe.py: cuBLASLt's GELU_AUX / DGELU products against product + our GELU
#            kernels on the MLP shapes (what a GELU in the products' epilogues could save)
#   gproduct scripts/probes/gelu_product_probe.py: our TMA + wgmma product with the exact GELU (and its derivative) in
#            the epilogue, checked, then timed against cuBLAS's product + our GELU kernels (SIDE_GPRODUCT_MODELS)
#   gpncu    the same probe under Nsight Compute: one launch each of SIDE_GPNCU_FORMS (default cuBLAS's forward product
#            and our plain forms) on SIDE_GPNCU_MODEL (gpt2-small): L2 and DRAM bytes and throughput, tensor pipe, stalls
#   probe    scripts/probes/tma_wgmma_probe.py: TMA and swizzled wgmma through NVRTC and CuPy, PASS/FAIL lines
#   profile  torch.profiler over steps 101-130 of the cupy side (graph, half roundings) of SIDE_PROFILE (MODEL or
#            MODEL:DTYPE, default nanogpt in bfloat16, or MODEL:DTYPE:VARIANT with that variant's bench.env) as the families stage runs it (tr2.profile_run), this tree; the kernels a step, by name, in
#            profile-MODEL.txt (scripts/kernel_list.py), the profile.json beside
# Carry .cache/kernels.tar.xz, .cache/products, .cache/nanoGPT, data, .cache/baseline.
#   usage: bash scripts/side_call.sh [OUT]     SIDE_CALL_S: seconds the call may take (default 540)
set -u -o pipefail
OUT=${1:-${OUT:-$PWD/side-call-out}}
STAGES=",${SIDE_STAGES:-records,tests,bench},"
source scripts/device_env.sh || exit 1
call_begin "$OUT" "${SIDE_CALL_S:-540}"
if [[ $STAGES == *,records,* ]]; then
  mkdir -p .cache/products-eager && mv .cache/products/*.json .cache/products-eager/ 2>/dev/null
  timeout 150 python3 -m tr2.cupy_side.products --models "${SIDE_MODELS:-nanogpt,gpt2-small,gpt2-medium}" --builds bf16r \
    --timing graph >"$W/products.log" 2>&1
  echo "== records (exit $?, $(elapsed) s)"; grep -c "chosen" "$W/products.log"
  (cd .cache && tar czf "$OUT/records.tgz" products products-eager)
fi
if [[ $STAGES == *,tests,* ]]; then
  timeout "${SIDE_GRAPH_TESTS_S:-300}" python3 -m pytest -q -s -p no:cacheprovider -rfE -m gpu tests/test_graph_gpu.py \
    -k "${SIDE_GRAPH_TESTS:-not nothing}" >"$W/pytest_graph.log" 2>&1
  echo "== graph tests (exit $?, $(elapsed) s)"; grep -E "vs|passed|failed" "$W/pytest_graph.log" | tail -12
  timeout "${SIDE_TESTS_S:-240}" python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py tests/test_products_gpu.py \
    -k "${SIDE_TESTS:-matmul or product or capture or peak or step}" >"$W/pytest.log" 2>&1
  echo "== kernel tests (exit $?, $(elapsed) s)"; grep -E "^(FAILED|ERROR)" "$W/pytest.log" | head; tail -2 "$W/pytest.log"
  if [ -n "${SIDE_TESTS_LATE:-}" ]; then   # tests that may hang (a new kernel's barriers): apart, under their own limit
    timeout "${SIDE_TESTS_LATE_S:-150}" python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernels_gpu.py \
      -k "$SIDE_TESTS_LATE" >"$W/pytest_late.log" 2>&1
    late=$?
    echo "== late kernel tests (exit $late, $(elapsed) s; 124: the limit stopped them)"
    grep -E "^(FAILED|ERROR)" "$W/pytest_late.log" | head; tail -2 "$W/pytest_late.log"
    if [ "$late" -ne 0 ]; then   # the TMA forms did not pass: not timed below
      # A hang (124) may be any of them: all are left out. Otherwise only the forms whose tests failed: the forward's
      # TMA form (tmawr: test_attention_forward_tma_wide) and the backward's TMA dK/dV with either dQ (tmarr, tmarrqf,
      # and tmarrqg, the grouped pair the default runs on long rows: test_attention_wgmma_backward_is_the_mma_sync_bits),
      # or the grouped pair alone (test_attention_grouped_backward), or the descending chain (tmarrqc:
      # test_attention_dq_chain; the ascending chain with it, their turns share their pieces), or the ascending chain
      # alone (tmarrqa: test_attention_dq_chain_ascending).
      # An empty list would mean every form: the reference alone instead.
      drop_fwd='tmawr' drop_bwd='tmarr|tmarrqf|tmarrqg|tmarrqc|tmarrqa'
      if [ "$late" -ne 124 ]; then
        failed=$(grep -E "^(FAILED|ERROR)" "$W/pytest_late.log")
        grep -q forward_tma <<<"$failed" || drop_fwd=none_such
        if ! grep -q wgmma_backward <<<"$failed"; then
          drop_bwd=none_such
          grep -q grouped_backward <<<"$failed" && drop_bwd="$drop_bwd|tmarrqg"
          grep -q 'dq_chain\[' <<<"$failed" && drop_bwd="$drop_bwd|tmarrqc|tmarrqa"
          grep -q 'dq_chain_ascending\[' <<<"$failed" && drop_bwd="$drop_bwd|tmarrqa"
        fi
      fi
      fwd=$(echo "${TR2_FWD_VARIANTS:-}" | tr ',' '\n' | grep -vxE "$drop_fwd" | paste -sd, -)
      bwd=$(echo "${TR2_BWD_FORMS:-}" | tr ',' '\n' | grep -vxE "$drop_bwd" | paste -sd, -)
      export TR2_FWD_VARIANTS=${fwd:-mma} TR2_BWD_FORMS=${bwd:-recompute}
      echo "   so not timed: $drop_fwd (forward), $drop_bwd (backward); now '$TR2_FWD_VARIANTS' and '$TR2_BWD_FORMS'"
    fi
  fi
fi
if [[ $STAGES == *,gelu,* ]] && [ "$(left)" -gt 150 ]; then
  timeout 60 python3 scripts/gelu_bench.py "$W/gelu_bench.jsonl" 3 20 >"$W/gelu_bench.log" 2>&1
  echo "== gelu by table (exit $?)"; tail -8 "$W/gelu_bench.log"
fi
if [[ $STAGES == *,epilogue,* ]] && [ "$(left)" -gt 90 ]; then
  PYTHONPATH=lib:scripts timeout 120 python3 scripts/probes/gelu_epilogue_probe.py "$W/gelu_epi.jsonl" 3 20 \
    >"$W/gelu_epi.log" 2>&1
  echo "== gelu epilogue probe (exit $?, $(elapsed) s)"; tail -10 "$W/gelu_epi.log"
fi
if [[ $STAGES == *,gproduct,* ]] && [ "$(left)" -gt 60 ]; then
  PYTHONPATH=lib:scripts timeout $(( $(left) - 30 < 240 ? $(left) - 30 : 240 )) python3 scripts/probes/gelu_product_probe.py \
    "$W/gelu_product.jsonl" 3 20 ${SIDE_GPRODUCT_MODELS:-} >"$W/gelu_product.log" 2>&1
  echo "== gelu product probe (exit $?, $(elapsed) s)"; grep -vE "^\s*$" "$W/gelu_product.log" | tail -24
fi
if [[ $STAGES == *,gpncu,* ]] && [ "$(left)" -gt 60 ]; then
  # Nsight Compute on one launch of each named form of the GELU product probe (cuBLAS's product is "fwd product"),
  # on one model: where the L2, the DRAM and the tensor pipe stand for ours against cuBLAS's kernel
  gpm="regex:sm__pipe_tensor_op_.*_cycles_active\.avg\.pct_of_peak_sustained_active,gpu__time_duration.sum"
  gpm+=",lts__t_bytes.sum,dram__bytes.sum,sm__cycles_active.avg,smsp__inst_executed.sum"
  gpm+=",dram__bytes_read.sum,dram__bytes_write.sum"   # whether the output pushes the operands out of the L2
  # the threads' own shared-memory traffic (stores of the staging, loads of the tables and the diagnostics), by names
  # the ncu stage above already uses (an unknown name fails the whole run); the copy engine's and wgmma's shared-memory
  # traffic is not in these
  gpm+=",l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"
  gpm+=",l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
  gpm+=",regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio"
  GP_PROFILE=${SIDE_GPNCU_FORMS:-fwd product,gp_plain_tn_s,gp_plain_tn_o,gp_plain_tn_x4,gp_plain_tn_c2x,gp_plain_tn_bx4} \
    PYTHONPATH=lib:scripts timeout $(( $(left) - 30 < 240 ? $(left) - 30 : 240 )) ncu --clock-control none \
    --profile-from-start off -k "regex:nvjet|gp_" --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section LaunchStats --metrics "$gpm" python3 scripts/probes/gelu_product_probe.py "$W/gp_ncu.jsonl" 1 1 \
    ${SIDE_GPNCU_MODEL:-gpt2-small} >"$W/ncu-gproduct.txt" 2>&1
  echo "== gelu product under Nsight Compute (exit $?, $(elapsed) s)"
  grep -E "^  [a-z_0-9]+ \(|Duration|L2 Cache Throughput|DRAM Throughput|Memory Throughput|lts__t_bytes.sum|dram__bytes.*sum|hmma_cycles_active.avg.pct|L2 Hit Rate |Cluster Size|mem_shared_op_..\.sum|Elapsed Cycles" \
    "$W/ncu-gproduct.txt" | head -80
fi
if [[ $STAGES == *,probe,* ]] && [ "$(left)" -gt 60 ]; then
  timeout 90 python3 scripts/probes/tma_wgmma_probe.py --out "$W/tma_wgmma_probe.jsonl" >"$W/tma_wgmma_probe.log" 2>&1
  echo "== tma/wgmma probe (exit $?, $(elapsed) s)"; grep -E "PASS|FAIL" "$W/tma_wgmma_probe.log" | tail -12
fi
if [[ $STAGES == *,ncu,* ]]; then
  pipes="regex:sm__pipe_tensor_op_.*_cycles_active\.avg\.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active"
  pipes+=",l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
  pipes+=",l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"
  pipes+=",smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active"
  # the exponentials' pipe (MUFU, counted as XU) and the issue rate: the fifty-fifth session's forward against cuDNN's
  pipes+=",sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active"
  # which memory unit is the busy one (the float32 wgmma backward's "mem busy" of 64-71%, results/h100-perf-20261206e
  # call 4, did not say): the L2's traffic and the DRAM's bytes (names the gpncu stage ran; the section adds the hit rate)
  pipes+=",lts__t_bytes.sum,dram__bytes_read.sum,dram__bytes_write.sum"
  # why a warp could not issue: cycles a stall reason holds a warp, per issued instruction (the thirteenth session's
  # call collected none, and could say only that most cycles had no eligible warp)
  pipes+=",regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio"
  ncu_specs=${SIDE_NCU:-gpt2-small:bfloat16:1}
  for spec in ${ncu_specs//,/ }; do   # specs apart by spaces or commas
    [ "$(left)" -gt 90 ] || break
    IFS=: read -r model dtype hr variant <<<"$spec"
    tag=$model-$dtype-$hr${variant:+-$variant}
    envs=() script=scripts/attention_ncu.py kernels=regex:attn_
    if [ "$variant" = cudnn ]; then   # PyTorch's cuDNN attention at the same shape (scripts/sdpa_ncu.py)
      script=scripts/sdpa_ncu.py kernels="regex:sdpa|flash|dot_do_o|convert_dq" hr=
    elif [ -n "$variant" ]; then
      read -r -a envs <<<"$(cat ".cache/variants/$variant/bench.env" 2>/dev/null | tr '\n' ' ')"
    fi
    # SIDE_NCU_FLAGS: more of ncu's options, e.g. "--cache-control none --replay-mode application" so that a kernel
    # finds the L2 as the kernel before it left it (ncu flushes the caches before each pass by default)
    env "${envs[@]}" timeout $(( $(left) - 60 < 150 ? $(left) - 60 : 150 )) ncu --clock-control none -k "$kernels" \
      ${SIDE_NCU_FLAGS:-} --profile-from-start off --section SpeedOfLight --section WarpStateStats --section Occupancy \
      --section LaunchStats --section SchedulerStats --section MemoryWorkloadAnalysis --metrics "$pipes" \
      python3 $script "$model" "$dtype" $hr >"$W/ncu-$tag.txt" 2>&1
    echo "== ncu $tag (exit $?, $(elapsed) s; ${envs[*]:-default forms})"
    grep -E "^  (attn_|cudnn|void cudnn)|Duration|tensor_op_gmma|tensor_op_hmma.*pct|bank_conflicts|No Eligible|Registers Per|Achieved Occ|Mem Busy|L2 Hit Rate |pipe_shared_cycles" \
      "$W/ncu-$tag.txt" | head -80
    # the three largest stall reasons of each kernel
    awk '/^  (attn_|cudnn|void cudnn)/{k=$1=="void"?$2:$1} /issue_stalled_.*per_issue_active/{sub(/smsp__average_warps_issue_stalled_/,"",$1);
      sub(/_per_issue_active.ratio/,"",$1); gsub(/,/,"",$NF); print k, $1, $NF}' "$W/ncu-$tag.txt" | sort -k1,1 -k3,3gr | awk 'c[$1]++<3' 
  done
fi
if [[ $STAGES == *,sv,* ]]; then
  for spec in ${SIDE_SV:-gpt2-small:float32:0:attn_backward_dq_wgf}; do
    [ "$(left)" -gt 60 ] || break
    IFS=: read -r model dtype hr kernel variant <<<"$spec"
    lib=$PWD/lib envs=()
    if [ -n "$variant" ]; then
      lib=$PWD/.cache/variants/$variant/lib
      read -r -a envs <<<"$(cat ".cache/variants/$variant/bench.env" 2>/dev/null | tr '\n' ' ')"
    fi
    name=$(tr -c 'A-Za-z0-9_.\n-' '_' <<<"$model-$dtype-$hr-$kernel${variant:+-$variant}")
    env "${envs[@]}" PYTHONPATH="$lib:/tmp/site" bash scripts/source_view.sh "$W/sv" "$name" "$kernel" 1 \
      $(( $(left) - 30 < 90 ? $(left) - 30 : 90 )) -- python3 scripts/attention_ncu.py "$model" "$dtype" "$hr"
    rm -f "$W/sv/$name.ncu-rep"
    [ -f "$W/sv/$name-sass.csv.gz" ] && python3 scripts/sass_dynamic.py "$W/sv/$name-sass.csv.gz" --runs 3
  done
fi
if [[ $STAGES == *,fwd,* ]] && [ "$(left)" -gt 60 ]; then
  timeout 120 python3 scripts/attention_forward_variants.py "$W/fwd.jsonl" 3 20 >"$W/fwd.log" 2>&1
  echo "== attention forward kernels (exit $?, $(elapsed) s)"; tail -12 "$W/fwd.log"
fi
if [[ $STAGES == *,profile,* ]]; then
  for spec in ${SIDE_PROFILE:-nanogpt}; do   # MODEL, MODEL:DTYPE (default bfloat16) or MODEL:DTYPE:VARIANT
    [ "$(left)" -gt 120 ] || break
    IFS=: read -r model dtype variant <<<"$spec"
    dtype=${dtype:-bfloat16}
    name=$model$([ "$dtype" = bfloat16 ] || echo "-$dtype")${variant:+-$variant}
    envs=()   # a variant's bench.env sets the run's environment (the kernels stay this tree's)
    [ -n "$variant" ] && read -r -a envs <<<"$(cat ".cache/variants/$variant/bench.env" 2>/dev/null | tr '\n' ' ')"
    hr=$([ "$dtype" = float32 ] || echo --half-roundings)   # the trainer refuses half roundings in float32
    env "${envs[@]}" timeout 150 python3 -m tr2.profile_run --window 100 130 --out "$W/prof-$name" --model "$model" --dtype "$dtype" \
      --device cuda --steps 130 --seed 1337 --eval-interval 0 --log-interval 10 --side cupy $hr \
      --cuda-graph >"$W/prof-$name.log" 2>&1
    echo "== profile $name (exit $?, $(elapsed) s)"
    cp "$W/prof-$name/profile.json" "$W/profile-$name.json" 2>/dev/null
    python3 scripts/kernel_list.py "$W/profile-$name.json" >"$W/profile-$name.txt" 2>&1 && head -12 "$W/profile-$name.txt"
  done
fi
L=$(( $(left) - ${SIDE_AFTER_BENCH_S:-0} ))
if [[ $STAGES == *,bench,* ]] && [ "$L" -gt 90 ]; then
  TR2_BENCH_ROUNDS=${SIDE_ROUNDS:-1} TR2_BENCH_CUPY=graph \
    TR2_BENCH_CUPY_LIBS=${SIDE_LIBS-main=.cache/baseline/lib} \
    TR2_BENCH_TORCH_MODES=${SIDE_TORCH-} TR2_BENCH_SELECT=${SIDE_SELECT:-nanogpt/bfloat16,gpt2-small/bfloat16,gpt2-medium/bfloat16} \
    timeout "$L" python3 scripts/device_bench.py "$W/bench" "bench:$((L - 15))" >"$W/bench.log" 2>&1
  echo "== bench"; tail -14 "$W/bench.log"
fi
if [[ $STAGES == *,variants,* ]] && [ "$(left)" -gt 40 ]; then
  timeout $(( $(left) - 10 )) python3 scripts/attention_backward_variants.py "$W/bwd.jsonl" 3 10 >"$W/bwd.log" 2>&1
  echo "== attention backward forms (exit $?)"; tail -12 "$W/bwd.log"
fi
# what the stages left (a call's exit status is tar's: 0 unless none ran)
(cd "$W" && tar czf "$OUT/logs.tgz" $(ls -d *.log *.jsonl *.txt profile-*.json bench sv 2>/dev/null))
