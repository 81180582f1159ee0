# Source this on the GPU machine (the device tool's copy of the repo): the carried wheels
# (.whl: papermill, nbclient, ipykernel, nbval ...) go to /tmp/site, tr2 is imported from lib/,
# the data from the carried data/ folder. The machine has no network, so nothing else installs.
# Carry .cache/nanoGPT too (a copy of ../shared/nanoGPT): the tests check for it before they start and the
# nanogpt side runs it; it is put where the cards' default nanogpt_path looks, ../shared/nanoGPT.
set -o pipefail
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
fi
export PYTHONPATH="$PWD/lib:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
if [ -d "$PWD/data" ]; then export TR2_DATA="$PWD/data"; fi   # the carried data; else where tr2.data always looks
export TR2_PYTHON=python3
# Inductor's and Triton's caches stay with the checkout, so a later stage in the same call reuses them.
export TORCHINDUCTOR_CACHE_DIR="$PWD/.cache/inductor" TRITON_CACHE_DIR="$PWD/.cache/triton"
export CUPY_CACHE_DIR="$PWD/.cache/cupy"
# nbconvert's templates (in the carried wheels) lie outside Jupyter's default data paths
export JUPYTER_PATH=/tmp/site/share/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}

# machine_record FILE: the date, nvidia-smi (and the GPU's UUID: which calls shared a machine), the Python/CuPy/torch versions, the commit a call ran
# (the caller's word) and the digest of lib/tr2's sources that travelled (`python -m tr2.sysinfo lib-digest COMMIT` here gives a commit's), the
# header every raw output of a device call carries (perf_call.sh, quick_call.sh).
machine_record() {
  { date -u; nvidia-smi; nvidia-smi --query-gpu=uuid,serial,clocks.sm,clocks.max.sm --format=csv; python3 -c "import cupy, torch, sys; print('python', sys.version.split()[0], 'cupy',
cupy.__version__, 'torch', torch.__version__, 'cuda (torch)', torch.version.cuda)"; echo "commit ${TR2_GIT_COMMIT:-unknown}"; echo "lib digest $(python3 -m tr2.sysinfo lib-digest)"; } >"$1" 2>&1
}

# use_carried_caches: the carried cubins (.cache/kernels.tar.xz, unpacked once into .cache/kernels) and products
# record (.cache/products) as the kernel and products caches of everything run after it.
use_carried_caches() {
  # A marker, not the folder: a command run before this one that compiled a kernel makes the folder, and the carried
  # cubins were then never unpacked (call 2 of results/h200-perf-20261203j: the probe and the profile after it both
  # compiled every kernel from source, and both were stopped by their timeouts).
  if [ -f .cache/kernels.tar.xz ] && [ ! -f .cache/kernels/.unpacked ]; then
    mkdir -p .cache/kernels && tar xJf .cache/kernels.tar.xz -C .cache/kernels && touch .cache/kernels/.unpacked
  fi
  export TR2_KERNEL_CACHE="$PWD/.cache/kernels" TR2_PRODUCTS_DIR="$PWD/.cache/products"
}

# call_begin OUT LIMIT_S: a device call's start (the call scripts'): OUT made, the carried caches in use, the machine
# recorded, W a scratch folder; from then on `left` prints the seconds left of LIMIT_S and `elapsed` those spent.
call_begin() {
  CALL_LIMIT_S=$2 CALL_START=$(date +%s)
  W=$(mktemp -d)
  mkdir -p "$1"
  use_carried_caches
  machine_record "$1/machine.txt"
}
elapsed() { echo $(( $(date +%s) - CALL_START )); }
left() { echo $(( CALL_LIMIT_S - $(elapsed) )); }

if [ ! -d ../shared/nanoGPT ] && [ -d .cache/nanoGPT ]; then
  mkdir -p ../shared && cp -r .cache/nanoGPT ../shared/nanoGPT || echo "no ../shared/nanoGPT: tests and the nanogpt side will stop"
fi

# out_fold OUT: the device tool returns at most 8 files from $OUT, none deeper than OUT/a/b/file. Where more lie there
# (an ad-hoc command's scratch runs, several stages' logs), everything but OUT/machine.txt goes into OUT/rest.tgz, so
# nothing is left behind on a machine that is released minutes later (results/h200-edition-20261203e lost a call's
# method A runs to that limit). End a command that writes under $OUT with it.
out_fold() {
  local out=$1 n deep tmp
  n=$(find "$out" -type f | wc -l)
  deep=$(find "$out" -mindepth 4 -type f -print -quit)   # OUT/a/b/file is depth 3 and comes back
  if [ "$n" -le 8 ] && [ -z "$deep" ]; then return 0; fi
  tmp=$(mktemp -d)
  tar czf "$tmp/rest.tgz" -C "$out" --exclude=./machine.txt . || return 1
  find "$out" -mindepth 1 ! -path "$out/machine.txt" -delete
  mv "$tmp/rest.tgz" "$out/rest.tgz"
  rmdir "$tmp"
  echo "out_fold: $n files under $out, folded into rest.tgz (machine.txt beside it)"
}
