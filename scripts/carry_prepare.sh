#!/usr/bin/env bash
# A device call's carry, made on the CPU machine (the GPU machine has no NVRTC of its own and no network):
#   .cache/kernels.tar.xz   the cubins of this tree and of every variant's commit (python -m tr2.cupy_side.gpu.cubins,
#                           NVRTC from TR2_NVRTC or wherever cubins.py finds one), files at the archive's top level
#   .cache/variants/NAME/   lib/ and params/ of a commit (git archive) or of this tree, and bench.env (KEY=VALUE lines:
#                           scripts/device_bench.py sets them for that variant's runs)
#   .cache/products         the products records of the folder RECORD (a results/ folder of a committed call, or a
#                           stage folder's products/), each under the name its card and cuBLASLt version give
#   .cache/nanoGPT, data/   ../shared/nanoGPT and ../shared/data/shakespeare
# Then the carry's size (the device tool takes 64 MiB in all) and the run tool's carry list.
#   usage: RECORD=results/h200-perf-20261202c/record-call3 \
#          VARIANTS="base=6f05773 pdl=tree:TR2_PDL=1 fwd=tree:TR2_GELU_REVERSE=0" bash scripts/carry_prepare.sh
#   (NAME=REV[:KEY=VALUE,...]; REV "tree" is this working tree)
set -euo pipefail
cd "$(dirname "$0")/.."
: "${RECORD:?RECORD=<a results/ folder holding the products record (nvidia-h200-cublaslt*.json)>}"
ls "$RECORD"/*.json >/dev/null || { echo "RECORD=$RECORD holds no products record (*.json)" >&2; exit 2; }
KERNELS="$PWD/.cache/kernels"
build() {   # build LIB_PARENT: every kernel file of that lib/ into .cache/kernels
  (cd "$1" && TR2_KERNEL_CACHE="$KERNELS" PYTHONPATH=lib python3 -m tr2.cupy_side.gpu.cubins --arch sm_90)
}
mkdir -p "$KERNELS"
echo "== this tree"; build .
rm -rf .cache/variants && mkdir -p .cache/variants
for spec in ${VARIANTS:-}; do
  name=${spec%%=*} rest=${spec#*=}
  rev=${rest%%:*} envs=$([[ $rest == *:* ]] && echo "${rest#*:}" || true)
  [[ $name =~ ^[A-Za-z0-9_-]+$ ]] || { echo "variant name '$name' in '$spec': letters, digits, _ and - only" >&2; exit 2; }
  d=.cache/variants/$name
  mkdir -p "$d"
  if [ "$rev" = tree ]; then
    cp -r lib params "$d/"
  else
    git rev-parse --verify -q "$rev^{commit}" >/dev/null || { echo "variant $name: no commit '$rev'" >&2; exit 2; }
    git archive "$rev" lib params | tar x -C "$d"
    echo "== $name ($rev)"; build "$d"
  fi
  find "$d" -name __pycache__ -prune -exec rm -rf {} +
  : >"$d/bench.env"
  [ -n "$envs" ] && tr ',' '\n' <<<"$envs" >"$d/bench.env"
  echo "variant $name: $rev, bench.env: $(tr '\n' ' ' <"$d/bench.env")"
done
tar cJf .cache/kernels.tar.xz -C "$KERNELS" .
# each record under the name its content gives (card, cuBLASLt version), the one the runs look for: a results
# folder keeps its copy as NAME-<digest>.json, under which no run finds it (the 59th session's edition runs read none)
rm -rf .cache/products && mkdir -p .cache/products
TR2_PRODUCTS_DIR=.cache/products PYTHONPATH=lib python3 -m tr2.cupy_side.products --place "$RECORD"/*.json
rm -rf .cache/nanoGPT && cp -r ../shared/nanoGPT .cache/nanoGPT
mkdir -p data && cp -r ../shared/data/shakespeare/* data/
du -shc data .cache/kernels.tar.xz .cache/products .cache/nanoGPT .cache/variants | tail -1 | sed 's/total/carried in all (at most 64 MiB)/'
echo 'carry: ["data", ".cache/kernels.tar.xz", ".cache/products", ".cache/nanoGPT", ".cache/variants"]'
