"""The cupy side's CUDA forms: kernels in ``cupy_side/kernels/*.cu`` (one operation per file, forward and
backward beside each other), compiled ahead by NVRTC into cubins (``gpu/cubins.py``) that CuPy's ``RawModule``
loads, and the matrix products
through cuBLAS called by ctypes (``gpu/blas.py``).

This package imports nothing from CuPy at import time: the host-side pieces (the kernel-file map, the
sources, the half-type packing helpers in ``halfbits``) work and are tested on machines without a GPU.
``tr2.cupy_side.gpu.backend.CudaBackend`` is the backend the model code runs on for ``--device cuda``.
"""
from __future__ import annotations

import ctypes.util
import functools
import glob
import os
import re
import sys
from pathlib import Path

from ... import Tr2Error

KERNELS_DIR = Path(__file__).resolve().parent.parent / "kernels"

# Operation of the backend table (docs/architecture.md) -> the CUDA source that holds its kernels.
# None: the operation's CUDA form is cuBLAS (gpu/blas.py), not a kernel file.
OP_FILES: dict[str, str | None] = {
    "embedding": "embedding.cu",
    "layernorm": "layernorm.cu",
    "matmul": None,
    "attention": "attention.cu",
    "gelu": "gelu.cu",
    "dropout": "dropout.cu",
    "residual": "residual.cu",
    "residual_layernorm": "residual_layernorm.cu",
    "cross_entropy": "cross_entropy.cu",
    "adamw": "adamw.cu",
    "global_norm": "global_norm.cu",
}

# Kernel files that are no operation of the table but serve several (the products' input casts).
HELPER_FILES = ("cast.cu",)

# Operation -> the backend methods (docs/architecture.md's table) it implements.
OP_METHODS: dict[str, tuple[str, ...]] = {
    "embedding": ("embedding_forward", "embedding_backward"),
    "layernorm": ("layernorm_forward", "layernorm_backward"),
    "matmul": ("matmul_forward", "matmul_backward"),
    "attention": ("attention_forward", "attention_backward"),
    "gelu": ("gelu_forward", "gelu_backward"),
    "dropout": ("dropout_forward", "dropout_backward"),
    "residual": ("residual_forward",),
    "residual_layernorm": ("residual_layernorm_forward", "residual_layernorm_backward"),
    "cross_entropy": ("cross_entropy_forward", "cross_entropy_forward_backward"),
    "adamw": ("adamw_scalars", "adamw_update"),
    "global_norm": ("global_norm",),
}

# The row sizes whose LayerNorm backward and residual+LayerNorm forward hold a row in registers: the models' widths.
REGISTER_ROW_SIZES = (384, 768, 1024)

# The kernels each wrapper launches, by file: checked against the sources by the CPU tests.
FILE_KERNELS: dict[str, tuple[str, ...]] = {
    "embedding.cu": ("embedding_forward", "embedding_dropout_forward", "embedding_dropout_forward_v4",
                     "embedding_sort_count", "embedding_sort_total", "embedding_sort_scan", "embedding_sort_base",
                     "embedding_sort_place", "embedding_backward_wte", "embedding_backward_wte_sums",
                     "embedding_backward_wpe"),
    "layernorm.cu": ("layernorm_forward", "layernorm_backward", "layernorm_dw_final", "layernorm_dw_final_stacked",
                     *(f"layernorm_backward_c{c}" for c in REGISTER_ROW_SIZES)),
    "attention.cu": ("tf32_round_check",) + tuple(
        name for hs in (64, 32) for name in
        [f"attn_{kernel}_{build}_hs{hs}" for build in ("f32", "tf32", "f32s", "tf32s")
         for kernel in ("forward", "backward_dkdv", "backward_dq")]
        + [f"attn_{kernel}_{build}_hs{hs}" for build in ("bf16", "bf16r", "f16", "f16r")
           for kernel in ("forward", "backward_dkdv", "backward_dq", "backward")]
        + [f"attn_row_dots{wide}_{kind}_hs{hs}" for kind in ("bf16", "f16") for wide in ("", "_wide")])
        + tuple(f"attn_backward_{kernel}_{build}_hs{hs}" for hs in (64, 32) for build in ("bf16r", "f16r")
                for kernel in ("dkdv_ds_l2", "dq_ds_l2"))
        + tuple(f"attn_forward_wg1_{build}_hs64" for build in ("bf16r", "f16r"))
        + tuple(f"attn_forward_wgf2_{build}_hs64" for build in ("f32", "tf32"))
        + ("attn_backward_dkdv_wgf2_tf32_hs64", "attn_backward_dq_wgf2_tf32_hs64"),
    "gelu.cu": ("gelu_forward", "gelu_backward", "gelu_forward_bf16_table", "gelu_backward_bf16_table",
                "gelu_forward_f16_fast", "gelu_backward_f16_fast"),
    "dropout.cu": ("dropout_apply", "dropout_mask", "dropout_bits"),
    "residual.cu": ("residual_forward",),
    "residual_layernorm.cu": ("residual_layernorm_forward", "residual_layernorm_backward", "residual_layernorm_dw_final",
                              *(f"residual_layernorm_{way}_c{c}{form}" for way, form in (("forward", ""), ("backward", ""),
                                                                                         ("backward", "_bulk"))
                                for c in REGISTER_ROW_SIZES)),
    "cross_entropy.cu": ("cross_entropy_count", "cross_entropy_forward", "cross_entropy_forward_backward",
                         "cross_entropy_forward_smem", "cross_entropy_forward_backward_smem",
                         "cross_entropy_forward_backward_smem_ex2",
                         "cross_entropy_forward_warp", "cross_entropy_forward_backward_warp", "cross_entropy_mean"),
    "adamw.cu": ("adamw_update", "adamw_update_tied", "adamw_scalars", "loss_scale_update"),
    "global_norm.cu": ("global_norm_partial", "global_norm_partial_wide", "global_norm_final", "global_norm_final_wide"),
    "cast.cu": ("cast_f32_to_bf16", "cast_f32_to_f16", "cast_bf16_to_f32", "cast_f16_to_f32", "cast_bf16_to_f32_wide",
                "cast_f16_to_f32_wide", "round_f32", "fill_f32"),
}

# Compile options handed to NVRTC. Never fast math. gpu/cubins.py adds the architecture and -ftz=true (what
# CuPy's RawModule always added when it compiled these files: denormal floats flush to zero in the kernels'
# float arithmetic; nothing in the training step lives near 1e-38).
COMPILE_OPTIONS = ("--std=c++17",)

_INCLUDE = re.compile(r'^\s*#include\s+"([^"]+)"\s*$', re.M)
_KERNEL_DECL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(?!__launch_bounds__)(\w+)\s*\(')
# attention.cu's instantiation macros, and the kernels each declares
_ATTN_MACRO = re.compile(r'^(ATTN_KERNELS_F32_STREAMED|ATTN_KERNELS_F32|ATTN_KERNELS_HALF|ATTN_ROW_DOTS|'
                         r'ATTN_FORWARD_WG1|ATTN_DS)\((\w+), [\w, ]*?(\d+)\)', re.M)
_ATTN_MACRO_KERNELS = {"ATTN_KERNELS_F32": ("forward", "backward_dkdv", "backward_dq"),
                       "ATTN_KERNELS_F32_STREAMED": ("forward", "backward_dkdv", "backward_dq"),
                       "ATTN_KERNELS_HALF": ("forward", "backward_dkdv", "backward_dq", "backward"),
                       "ATTN_ROW_DOTS": ("row_dots", "row_dots_wide"), "ATTN_FORWARD_WG1": ("forward_wg1",),
                       "ATTN_DS": ("backward_dkdv_ds_l2", "backward_dq_ds_l2")}
# attention.cu's float32 forward on wgmma: ATTN_FORWARD_WGF(warpgroups, build, split, head size)
_ATTN_WGF_MACRO = re.compile(r'^ATTN_FORWARD_WGF\((\d+), (\w+), \w+, (\d+)\)', re.M)
# and its dK/dV and dQ (one TF32 product): ATTN_BACKWARD_DKDV_WGF / _DQ_WGF (warpgroups, head size)
_ATTN_BWD_WGF_MACRO = re.compile(r'^ATTN_BACKWARD_(DKDV|DQ)_WGF\((\d+), (\d+)\)', re.M)
# layernorm.cu's and residual_layernorm.cu's instantiations of the register-row kernels, one a row size
_LN_ROWS_MACRO = re.compile(r'^(LAYERNORM|RESIDUAL_LAYERNORM)_(FORWARD|BACKWARD)_ROWS(_BULK)?\((\d+)\)', re.M)
# attention.cu's Geometry<K>: the half kinds' general template and float32's specialization.
_ATTN_GEOMETRY = re.compile(r'^template <(?:int K|)> struct Geometry(<KIND_F32>)? \{ static const int '
                            r'MT = (\d+), FWD = (\d+), DQ = (\d+), DKDV = (\d+); \};', re.M)


def kernel_files() -> list[str]:
    """Every .cu file the gpu package compiles."""
    return [f for f in OP_FILES.values() if f] + list(HELPER_FILES)


def load_source(filename: str) -> str:
    """The CUDA source of one kernel file with its local includes (common.cuh) inlined once each.

    Inlining (rather than -I) makes CuPy's compile cache key cover the headers too."""
    seen: set[str] = set()

    def expand(name: str) -> str:
        path = KERNELS_DIR / name
        if not path.is_file():
            raise FileNotFoundError(f"kernel source {path} does not exist")
        text = path.read_text()

        def sub(m):
            inc = m.group(1)
            if inc in seen:
                return f"// (already included: {inc})"
            seen.add(inc)
            return f"// ---- begin {inc} ----\n{expand(inc)}\n// ---- end {inc} ----"

        return _INCLUDE.sub(sub, text).replace("#pragma once", "")

    return expand(filename)


def declared_kernels(filename: str) -> list[str]:
    """Names of the extern "C" kernels a source declares (directly or through its instantiation macros)."""
    src = (KERNELS_DIR / filename).read_text()
    names = [n for n in _KERNEL_DECL.findall(src) if n not in ("NAME", "KERNEL")]   # macros' placeholders
    for macro, build, hs in _ATTN_MACRO.findall(src):
        names += [f"attn_{k}_{build}_hs{hs}" for k in _ATTN_MACRO_KERNELS[macro]]
    names += [f"attn_forward_wgf{nwg}_{build}_hs{hs}" for nwg, build, hs in _ATTN_WGF_MACRO.findall(src)]
    names += [f"attn_backward_{part.lower()}_wgf{nwg}_tf32_hs{hs}" for part, nwg, hs in _ATTN_BWD_WGF_MACRO.findall(src)]
    names += [f"{prefix.lower()}_{way.lower()}_c{c}{form.lower()}" for prefix, way, form, c in _LN_ROWS_MACRO.findall(src)]
    return names


def attention_geometry() -> dict:
    """attention.cu's Geometry, read from the source (the one place it is written): for "half" and "float32",
    the m16 tiles a warp owns (mt) and the rows of the tiles each kernel streams."""
    found = {("float32" if f32 else "half"): {"mt": int(mt), "forward": int(fwd), "backward_dq": int(dq),
                                               "backward_dkdv": int(dkdv)}
             for f32, mt, fwd, dq, dkdv in _ATTN_GEOMETRY.findall((KERNELS_DIR / "attention.cu").read_text())}
    if set(found) != {"half", "float32"}:
        raise RuntimeError(f"attention.cu: Geometry of {sorted(found)} found; both half and float32 expected")
    return found


# The wgmma dK/dV kernel (attention_backward_dkdv_tma_resident) stores whole tiles of this many queries.
WG_DKDV_QUERY_TILE = 64


def ds_row_halves(T: int, wgmma: bool) -> int:
    """The row width (ldq) of the stored dS^T, [B*H, T, ldq] halves: the dK/dV kernel's query tiles times their
    width, the zeros past T included; the mma.sync kernel's tiles (Geometry's backward_dkdv) or the wgmma one's."""
    tile = WG_DKDV_QUERY_TILE if wgmma else attention_geometry()["half"]["backward_dkdv"]
    return -(-T // tile) * tile


def find_nvidia_lib(stem: str, env: str | None = None) -> str | None:
    """Path of NVIDIA's shared library lib<stem>.so (cublas, nvrtc), or None: $env when set and not empty,
    else the one this process already mapped (CuPy's or torch's: then ours is the same library), else
    cuda-pathfinder's, else an nvidia wheel's under sys.path, else the CUDA install's, else the loader's.
    NVRTC's side libraries (nvrtc-builtins, the .alt. builds) never count as the library itself."""
    if env and os.environ.get(env):
        return os.environ[env]
    prefix = f"lib{stem}.so"

    def usable(path: str) -> bool:
        return os.path.basename(path).startswith(prefix) and ".alt." not in path

    try:
        with open("/proc/self/maps") as f:
            mapped = [line.split()[-1] for line in f if len(line.split()) >= 6]
        found = [m for m in mapped if usable(m) and os.path.isfile(m)]
        if found:
            return found[0]
    except OSError:
        pass
    try:
        from cuda import pathfinder
        path = getattr(pathfinder.load_nvidia_dynamic_lib(stem), "abs_path", None)
        if path and os.path.isfile(path):
            return path
    except Exception:   # no cuda-pathfinder, or it found nothing: the other places follow
        pass
    candidates = [c for site in sys.path for c in sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", prefix + "*")))]
    for root in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root:
            candidates += sorted(glob.glob(os.path.join(root, "lib64", prefix + "*")))
    candidates = [c for c in candidates if usable(c)]
    if candidates:
        return candidates[0]
    return ctypes.util.find_library(stem)


class SwitchError(Tr2Error, ValueError):
    """A kernel switch (TR2_*) set to a value or a combination that is not allowed: one line naming the switch, the
    value and what is allowed, which tr2.train prints as its error (exit 2) where a traceback would otherwise end the
    run (a ValueError too, as the switches' tests catch it)."""


# Kernel switches removed from the program with the forms they chose, each with why. One still set in the environment
# stops the run where the switches are read (kernel_switch: SwitchError naming it, its value and this reason), so that
# a bench variant that sets one does not time the default under its name. The attention forms' sessions: attention.cu's
# header and docs/perf.md; their code and tests before the removal, at ee6b673. The GELU, LayerNorm, loss and side
# stream forms': the headers of gelu.cu, layernorm_backward.cuh, residual_layernorm.cu and cross_entropy.cu, gpu/graph.py's
# docstring, and docs/perf.md; their code and tests before the removal, at 3f23587.
_ATTN_WG_DKDV = ("the wgmma dK/dV kernels on cp.async and their forms (wg1, wg2; o, d, p, t), measured slower than "
                 "the TMA dK/dV (tenth to nineteenth sessions)")
RETIRED: dict[str, str] = {
    "TR2_ZERO_BY_KERNEL": "the step's zero fills by a kernel, measured without a lead (forty-second session; 5f7ef8a)",
    "TR2_STEP_GRAPHS": "the step as two graphs, measured without a lead (forty-second session; 5f7ef8a)",
    "TR2_ATTN_F32_BLOCKS": "the float32 attention kernels at three blocks an SM (f32b3, tf32b3), measured slower on "
                           "both GPT-2 shapes in both builds (forty-sixth session; e006cd8)",
    "TR2_ATTN_FWD_BLOCKS": "the mma.sync forward at three blocks an SM (forward3), measured slower (fourteenth session)",
    "TR2_ATTN_FWD_WGP": "the pipelined wgmma forward (wgp1, wgp2), measured slower (eleventh and fourteenth sessions)",
    "TR2_ATTN_FWD_WGP_NWG": "the pipelined wgmma forward (wgp1, wgp2), measured slower (eleventh and fourteenth sessions)",
    "TR2_ATTN_FWD_PINGPONG": "the ping-pong wgmma forward (wgpp2), measured slower (twelfth and twentieth sessions)",
    "TR2_ATTN_FWD_TMA": "the TMA forward's forms at every row length, measured slower (thirteenth to twenty-seventh "
                        "sessions); form 7 stays the default on rows over 256 (TR2_ATTN_FWD_TMA_LONG=0 or 7)",
    "TR2_ATTN_DS_EVICT_FIRST": "the dS kernels without the evict-first L2 policy, measured slower (ninth session)",
    "TR2_ATTN_DQ_DS_QUERIES": "the dQ from dS at 64 queries a block, measured no faster (ninth session)",
    "TR2_ATTN_WG_DKDV_NWG": _ATTN_WG_DKDV,
    "TR2_ATTN_WG_DKDV_OVERLAP": _ATTN_WG_DKDV,
    "TR2_ATTN_WG_DKDV_ROW_DOTS": _ATTN_WG_DKDV,
    "TR2_ATTN_WG_DKDV_PINGPONG": _ATTN_WG_DKDV,
    "TR2_ATTN_WG_DKDV_BLOCKS": _ATTN_WG_DKDV,
    "TR2_ATTN_WG_DKDV_TMA": _ATTN_WG_DKDV + "; the TMA dK/dV runs wherever the wgmma dK/dV does (TR2_ATTN_WG_DKDV=0: "
                                            "the mma.sync kernel)",
    "TR2_ATTN_DKDV_TMA_FORM": "the TMA dK/dV's forms other than the resident one, measured slower (twentieth and "
                              "twenty-fifth sessions)",
    "TR2_ATTN_DQ_TMA_RESIDENT": "the resident TMA dQ, measured slower (twenty-fifth session)",
    "TR2_ATTN_DQ_TMA_ORDER": "the TMA dQ with the heads fastest, measured slower (twenty-eighth session)",
    "TR2_ATTN_DS_GROUP_BATCHES": "the backward a group of batches at a time, measured slower (twenty-ninth session)",
    "TR2_ATTN_F32_DQ_KT": "the float32 wgmma dQ's k^T written from the staged k rows (wgfk2), measured slower "
                          "(fifty-second session; 6369b54)",
    "TR2_ATTN_F32_DQ_RESIDENT": "the float32 wgmma dQ resident (wgfr2), three forms measured slower (fifty-third "
                                "session; 6369b54)",
    "TR2_ATTN_DQ_BULK": "dQ inside the resident TMA dK/dV kernel by ordered bulk reductions (tmarb, tmarbk), "
                        "measured slower (fifty-sixth and fifty-seventh sessions; 3d2f362)",
    "TR2_ATTN_DQ_BULK_DIAG": "the timing-only modes that measured where the bulk dQ form's time went, with the form "
                             "(fifty-seventh session; 3d2f362)",
    "TR2_ATTN_DKDV_Q128": "the resident TMA dK/dV with 128-query tiles (tmarq), measured slower (fifty-eighth "
                          "session; a05863e)",
    "TR2_ATTN_DKDV_DEEP": "the resident TMA dK/dV with four stages of q and dO (tmarrd), its step measured in one round "
                          "only, before the grouped order it could not join (fifty-fifth session; 1a3ac90)",
    "TR2_ATTN_DQ_CHAIN_STAGGER": "the descending chain's items in a staggered order (dqs), its bits and measured no "
                                 "faster (sixty-second and sixty-third sessions; 97e8ecd)",
    "TR2_ATTN_DQ_CHAIN_LAG": "the descending chain's turns a tile late (dqcl, dqsl), its bits and measured slower "
                             "(sixty-second and sixty-third sessions; 97e8ecd)",
    "TR2_GELU_F16_TABLE": "float16 GELU by table (gelu_*_f16_table), measured slower (thirteenth session)",
    "TR2_GELU_F16_SEG": "float16 GELU by segment (gelu_*_f16_seg), measured slower (twenty-ninth session)",
    "TR2_LN_FINAL_IN_KERNEL": "the LayerNorm backward's dw finished by its last blocks (*_dwsum), measured slower (ninth "
                              "session)",
    "TR2_LN_BWD_PREFETCH": "the register-row LayerNorm backward with dskip loaded early (_pf), measured without a gain "
                           "(twelfth session)",
    "TR2_LN_BWD_BLOCKS": "the register-row LayerNorm backward at three blocks an SM (_o3), measured a loss "
                         "(twenty-sixth session)",
    "TR2_CE_SMEM_DB": "the loss's shared-memory rows double-buffered (_smem2), measured slower (thirtieth session)",
    "TR2_SIDE_STREAM": "the weight gradients' products on a side stream (gpu/streams.py), measured within 1.3% of one "
                       "stream and above PyTorch's peak memory (eighth session)",
    "TR2_STREAM_PRIORITY": "the step graph's stream at the greatest priority beside the side stream (gpu/streams.py), "
                           "measured without a difference (eighth session)",
}


def check_retired() -> None:
    """Stop (SwitchError) where the environment sets a retired switch (RETIRED; a blank value counts as unset)."""
    for key, why in RETIRED.items():
        if switch_given(key):
            raise SwitchError(f"{key}={os.environ[key]!r}: removed with {why}; unset it")


def switch_given(key: str) -> bool:
    """Whether the environment sets the kernel switch `key` (a blank value counts as unset, as kernel_switch reads
    it): where a default yields to another form asked for, a value given explicitly does not."""
    return (os.environ.get(key) or "").strip() != ""


def kernel_switch(key: str, default: int, allowed: tuple = (0, 1)) -> int:
    """A kernel choice the environment may set for a run (a bench variant, e.g. TR2_ATTN_WG_DKDV=0): the integer
    value of os.environ[key], default where unset; a value outside `allowed` stops the run naming the key, the
    value and what is allowed (a misspelt variant must not run as the default and be timed as something else); a
    retired switch still set stops it likewise (check_retired), whichever switch is read."""
    check_retired()
    if not switch_given(key):
        return default
    raw = os.environ[key]
    try:
        value = int(raw.strip())
    except ValueError:
        value = None
    if value not in allowed:
        raise SwitchError(f"{key}={raw!r}: allowed values are {_allowed_text(allowed)}")
    return value


def _allowed_text(allowed: tuple) -> str:
    """kernel_switch's allowed values as its error names them: listed, or a long run of whole numbers by its ends."""
    values = sorted(allowed)
    if len(values) > 10 and values == list(range(values[0], values[-1] + 1)):
        return f"whole numbers from {values[0]} to {values[-1]}"
    return ", ".join(map(str, allowed))


def kernel_define(filename: str, name: str) -> int:
    """The integer a kernel file #defines as `name` (a block size its wrapper must launch with; decimal, or hex with an
    optional u, as a float16 code): read from the source, the one place it is written."""
    m = re.search(rf"^#define {name} (0x[0-9A-Fa-f]+|\d+)u?\b", (KERNELS_DIR / filename).read_text(), re.M)
    if m is None:
        raise RuntimeError(f"{filename}: no '#define {name} <integer>'")
    return int(m.group(1), 0)


@functools.cache
def _cross_entropy_smem_defines() -> tuple[int, int, int]:
    return tuple(kernel_define("cross_entropy.cu", n) for n in ("CE_SMEM_THREADS", "CE_SMEM_MIN_V", "CE_SMEM_MAX_V"))


def cross_entropy_plan(V: int, kind: int, aligned: bool) -> tuple[str, int, int]:
    """Which of cross_entropy.cu's rows takes logits of V columns of `kind` (0 float32, 1 bfloat16, 2 float16),
    their data 16-byte aligned or not: (kernel name suffix, threads a block, dynamic shared bytes a block).

    Evaluation and training both ask with the logits alone, so they take the same row and their losses agree bit
    for bit. Half-type rows of whole 16-byte vectors from CE_SMEM_MIN_V to CE_SMEM_MAX_V columns take the
    shared-memory row ("_smem": the row staged in V * 2 bytes of shared memory, two blocks an SM). Rows of at most
    CE_WARP_MAX_V columns take the warp row ("_warp": a warp a row, CE_WARP_ROWS rows a block; the only form that
    takes rows further apart than V). The others take the first kernels, which pick the registers or the scalar row
    themselves: 1024 threads above 16384 columns (8 vectors a thread then reach 65536 half or 32768 float32
    columns), else 256."""
    threads, lo, hi = _cross_entropy_smem_defines()
    if V <= kernel_define("cross_entropy.cu", "CE_WARP_MAX_V"):
        return "_warp", 32 * kernel_define("cross_entropy.cu", "CE_WARP_ROWS"), 0
    if kind in (1, 2) and aligned and V % 8 == 0 and lo <= V <= hi:
        return "_smem", threads, 2 * V
    return "", 1024 if V > 16384 else 256, 0
