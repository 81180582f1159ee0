#!/usr/bin/env bash
# A kernel's SASS on the CPU machine, from the cubin carry_prepare.sh / cubins.py built (no GPU, no device minute):
# cuobjdump and nvdisasm come from NVIDIA's wheels (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm, fetched once into
# TR2_SASS_TOOLS, default /tmp/sass-tools; pip reaches them here), which read sm_90 cubins of NVRTC 12.9.
# Why: a design can count its instructions before it costs device time (the twenty-ninth session's float16 GELU by
# segment issued as many instructions as the computing kernel it was to undercut, found only on the H200).
#   scripts/sass_cpu.sh FILE.cu KERNEL [sass_loops | raw]
#     FILE.cu  a kernel file of lib/tr2/cupy_side/kernels (the cubin of this tree's source, in TR2_KERNEL_CACHE, default
#              .cache/kernels); PYTHON the interpreter that imports tr2 (default python3; .venv/bin/python here)
#     KERNEL   the kernel's name;  the third word: sass_loops (default: scripts/sass_loops.py's table), main_path
#              (scripts/sass_main_path.py: its loop less the rarely taken branches' spans) or raw (the SASS)
set -euo pipefail
cd "$(dirname "$0")/.."
FILE=${1:?FILE.cu} KERNEL=${2:?KERNEL} WHAT=${3:-sass_loops}
case "$WHAT" in sass_loops|main_path|raw) ;; *) echo "sass_cpu: '$WHAT': sass_loops, main_path or raw" >&2; exit 2 ;; esac
# the cubin of this tree's source (cubins.py's key: the source's hash and the options; sm_90a for attention.cu)
cubin=$(PYTHONPATH=lib "${PYTHON:-python3}" -c "import sys; from tr2.cupy_side.gpu.cubins import path_for
print(path_for(sys.argv[1], 'sm_90'))" "$FILE") || { echo "sass_cpu: '$FILE' is not a kernel file of lib/tr2/cupy_side/kernels" >&2; exit 2; }
[ -f "$cubin" ] || { echo "sass_cpu: no cubin of this tree's $FILE ($cubin; build it: scripts/carry_prepare.sh or PYTHONPATH=lib python3 -m tr2.cupy_side.gpu.cubins --arch sm_90)" >&2; exit 2; }
TOOLS=${TR2_SASS_TOOLS:-/tmp/sass-tools}
VERSION=13.5.37
for pkg in nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm; do
  tool=${pkg#nvidia-cuda-}
  if [ ! -x "$TOOLS/$tool/nvidia/cu13/bin/$tool" ]; then
    mkdir -p "$TOOLS/$tool"
    python3 -m pip download -q --no-deps "$pkg==$VERSION" -d "$TOOLS/wheels" >&2
    (cd "$TOOLS/$tool" && python3 -m zipfile -e "$TOOLS"/wheels/"${pkg//-/_}"-"$VERSION"-*.whl . && chmod +x nvidia/cu13/bin/*)
  fi
done
export PATH="$TOOLS/cuobjdump/nvidia/cu13/bin:$TOOLS/nvdisasm/nvidia/cu13/bin:$PATH"
echo "sass_cpu: $cubin" >&2
case "$WHAT" in
  raw) cuobjdump -sass -fun "$KERNEL" "$cubin" ;;
  sass_loops) cuobjdump -sass -fun "$KERNEL" "$cubin" | python3 scripts/sass_loops.py ;;
  main_path) cuobjdump -sass -fun "$KERNEL" "$cubin" | python3 scripts/sass_main_path.py ;;
esac
