"""TMA + 128B-swizzled wgmma probe for a FlashAttention-3 form of the attention forward (tma_wgmma_probe.cu says
what each part checks and why). Prints one PASS/FAIL line a check, with numbers, and writes them as JSON lines.

On the GPU machine, from the repository root:

    PYTHONPATH=lib python3 scripts/probes/tma_wgmma_probe.py [--out FILE] [--skip-tput]

Each part (map, tile, wgmma, tput) runs in a child process of its own, so that a fault in one (a wrong
descriptor, a lost copy) leaves the others' lines standing; the .cu is compiled once here, by NVRTC for sm_90a
(cubins.Nvrtc, the project's options), and its ptxas lines printed. The pure functions at the top (the swizzle,
the descriptor packing, the tensor map's arguments) are what tests/test_tma_probe_cpu.py checks without a GPU.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# The tensor map's arguments and its encoding are gpu/tma.py's, which the model's TMA forward uses (written from this
# probe's first form of them); tensor_map_args stays importable from here for tests/test_tma_probe_cpu.py.
from tr2.cupy_side.gpu.tma import encode as tma_encode, tensor_map_args  # noqa: F401

HERE = Path(__file__).resolve().parent
CU_FILE = HERE / "tma_wgmma_probe.cu"
ARCH = "sm_90a"

# ---------------------------------------------------------------------------------------------- pure functions
TILE = 64                      # rows and bf16 columns of a box: 128 bytes a row, one head's q, k or v slice
TILE_BYTES = TILE * TILE * 2
SWIZZLE_SPAN = 1024            # the 128B swizzle repeats every 8 rows of 128 bytes


def swizzle_128b(offset):
    """Where logical byte `offset` of a 1024-byte-aligned tile of 128-byte rows lies under the 128B swizzle: the
    16-byte chunk index (bits 4-6) XOR the row within its 8-row group (bits 7-9). The .cu's sw128() is this."""
    off = np.asarray(offset, dtype=np.int64)
    return off ^ (((off >> 7) & 7) << 4)


def unswizzle_tile(raw: np.ndarray, rows: int = TILE) -> np.ndarray:
    """The logical (rows, 64) uint16 tile from the bytes of a 128B-swizzled shared-memory copy of it."""
    flat = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    logical = np.arange(rows * 128, dtype=np.int64)
    return flat[swizzle_128b(logical)].view(np.uint16).reshape(rows, TILE)


# wgmma's shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): field -> (first bit, width).
# Addresses and offsets are stored >> 4 (16-byte units).
DESC_FIELDS = {"start": (0, 14), "lbo": (16, 14), "sbo": (32, 14), "base_offset": (49, 3), "swizzle": (62, 2)}
DESC_SWIZZLE = {"none": 0, "128B": 1, "64B": 2, "32B": 3}
# The offsets the probe uses: K-major 128B (q, k): LBO unused inside one swizzled row (16 by convention), SBO =
# 1024 between 8-row groups. MN-major 128B (v for O = P V): LBO between 64-column blocks (unused at 64 columns),
# SBO = 1024 between 8-key groups; the other order is tried as well where that one fails.
K_MAJOR_STRIDES = (16, 1024)
V_STRIDES_TRIED = ((8192, 1024), (1024, 8192))


def wgmma_desc(addr: int, lbo: int, sbo: int, swizzle: str = "128B", base_offset: int = 0) -> int:
    """The 64-bit descriptor word for a shared-memory address and byte offsets (mirrors the .cu's desc_sw128)."""
    vals = {"start": (addr & 0x3FFFF) >> 4, "lbo": (lbo & 0x3FFFF) >> 4, "sbo": (sbo & 0x3FFFF) >> 4,
            "base_offset": base_offset, "swizzle": DESC_SWIZZLE[swizzle]}
    word = 0
    for name, (lo, width) in DESC_FIELDS.items():
        if not 0 <= vals[name] < (1 << width):
            raise ValueError(f"descriptor field {name}={vals[name]} does not fit {width} bits")
        word |= vals[name] << lo
    return word


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max() / max(np.abs(want).max(), 1e-30))


# ---------------------------------------------------------------------------------------------- the device side
STATUS = {0: "ok", 1: "timeout on a full barrier", 2: "timeout on an empty barrier", 3: "timeout on a Q barrier"}
KERNELS = ("tmap_echo_param", "tma_tile_param", "tma_tile_global", "wgmma_qk_pv", "tput_s2", "tput_s3", "tput_s2_reg",
           "tput_s3_reg")
# The qkv shape of the checks: rows B*T not a multiple of 64 (the last box crosses the end), C = 12 heads of 64.
ROWS, HEADS = 600, 12
COLS = 3 * HEADS * TILE


class Probe:
    def __init__(self, out: str, cubin: str):
        import cupy as cp
        self.cp, self.out = cp, out
        self.mod = cp.RawModule(path=cubin)

    def record(self, name: str, ok: bool, **numbers) -> bool:
        print(f"{'PASS' if ok else 'FAIL'} {name}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()), flush=True)
        with open(self.out, "a") as f:
            f.write(json.dumps({"probe": name, "pass": bool(ok), **numbers}) + "\n")
        return ok

    def qkv(self, rows: int = ROWS, cols: int = COLS, seed: int = 7):
        from tr2.cupy_side.gpu.halfbits import f32_to_bf16_bits
        host = f32_to_bf16_bits(np.random.default_rng(seed).standard_normal((rows, cols), dtype=np.float32))
        return host, self.cp.asarray(host)

    def encode(self, dev, rows: int, cols: int) -> bytes:
        """A 128B-swizzled map of 64 x 64 boxes over the device bf16 matrix `dev`, as its 128 bytes."""
        return tma_encode(dev, rows, cols, "bfloat16").tobytes()

    # The ways of handing 128 bytes to a `const __grid_constant__ TensorMap` parameter through CuPy's launcher.
    # CuPy passes a numpy array of size one by its data pointer (CNumpyArray), a numpy scalar by a copy of its
    # value (CScalar; structured/void scalars only in newer CuPy), and a CPointer as the pointer it holds.
    def param_forms(self, tmap: bytes):
        def aligned_array():
            raw = np.zeros(128 + 64, np.uint8)
            off = (-raw.ctypes.data) % 64
            raw[off:off + 128] = np.frombuffer(tmap, np.uint8)
            return raw[off:off + 128].view(np.dtype((np.void, 128)))   # shape (1,), 64-byte aligned data

        def void_scalar():
            return np.frombuffer(tmap, dtype=np.dtype((np.void, 128)))[0]

        def cpointer():   # the host buffer must outlive the launch: returned beside the pointer
            from cupy.cuda.function import CPointer
            keep = ctypes.create_string_buffer(tmap, 128)
            return CPointer(ctypes.addressof(keep)), keep

        return {"numpy_void_array": lambda: (aligned_array(), None), "numpy_void_scalar": lambda: (void_scalar(), None),
                "cupy_cpointer": cpointer}

    def param(self, form: str, tmap: bytes):
        """(argument, what must stay alive until the launch is done) for the named form."""
        return self.param_forms(tmap)[form]()

    # ------------------------------------------------------------------ part 1
    def part_map(self) -> dict:
        cp = self.cp
        host, dev = self.qkv()
        tmap = self.encode(dev, ROWS, COLS)
        self.record("encode", True, bytes=len(tmap), rows=ROWS, cols=COLS, first_words=[hex(w) for w in
                                                                                       np.frombuffer(tmap, np.uint64)[:4]])
        echo = self.mod.get_function("tmap_echo_param")
        working = []
        for form in self.param_forms(tmap):
            out = cp.zeros(16, cp.uint64)
            try:
                arg, keep = self.param(form, tmap)
                echo((1,), (32,), (arg, out))
                cp.cuda.runtime.deviceSynchronize()
                got = cp.asnumpy(out).tobytes()
                ok, why = got == tmap, "bytes equal" if got == tmap else "bytes differ"
            except Exception as e:   # a form CuPy refuses
                ok, why = False, f"{type(e).__name__}: {str(e)[:120]}"
            if ok:
                working.append(form)
            self.record(f"param_form {form}", ok, detail=why)
        return {"forms": working}

    # ------------------------------------------------------------------ part 2
    def part_tile(self, form: str) -> dict:
        cp = self.cp
        host, dev = self.qkv()
        tmap = self.encode(dev, ROWS, COLS)
        gmap = cp.asarray(np.frombuffer(tmap, np.uint64).copy())
        all_ok = True
        cases = [("inside", 77, HEADS * TILE + 3 * TILE), ("past_last_row", ROWS - 24, 2 * HEADS * TILE + 5 * TILE)]
        for via in ("param", "global"):
            if via == "param" and not form:
                self.record("tile via param", False, detail="no parameter form passed the echo")
                continue
            for name, row0, col0 in cases:
                out, raw = cp.zeros(TILE * TILE, cp.uint16), cp.zeros(TILE * TILE, cp.uint16)
                status = cp.zeros(1, cp.int32)
                arg, keep = self.param(form, tmap) if via == "param" else (gmap, None)
                t0 = time.perf_counter()
                self.mod.get_function(f"tma_tile_{via}")((1,), (128,), (arg, np.int32(row0), np.int32(col0), out, raw, status),
                                                         shared_mem=TILE_BYTES + 1024)
                cp.cuda.runtime.deviceSynchronize()
                ms = (time.perf_counter() - t0) * 1e3
                st = int(status.get()[0])
                want = np.zeros((TILE, TILE), np.uint16)
                valid = host[row0:row0 + TILE, col0:col0 + TILE]
                want[:valid.shape[0]] = valid
                got = cp.asnumpy(out).reshape(TILE, TILE)
                host_unsw = unswizzle_tile(cp.asnumpy(raw))
                oob_rows = TILE - valid.shape[0]
                ok = st == 0 and np.array_equal(got, want) and np.array_equal(host_unsw, want)
                all_ok &= ok
                self.record(f"tile via {via} {name}", ok, row0=row0, col0=col0, status=STATUS.get(st, st),
                            mismatches=int((got != want).sum()), host_unswizzle_mismatches=int((host_unsw != want).sum()),
                            oob_rows=oob_rows, oob_nonzero=int((got[TILE - oob_rows:] != 0).sum()) if oob_rows else 0,
                            raw_equals_unswizzled=bool(np.array_equal(cp.asnumpy(raw).reshape(TILE, TILE), want)),
                            wall_ms=round(ms, 3))
        return {"ok": all_ok}

    # ------------------------------------------------------------------ part 3
    def part_wgmma(self, form: str) -> dict:
        from tr2.cupy_side.gpu.halfbits import bf16_bits_to_f32, f32_to_bf16_bits
        cp = self.cp
        host, dev = self.qkv()
        tmap = self.encode(dev, ROWS, COLS)
        C, h, q_row, kv_row = HEADS * TILE, 5, 130, 320
        q = bf16_bits_to_f32(host[q_row:q_row + TILE, h * TILE:(h + 1) * TILE])
        k = bf16_bits_to_f32(host[kv_row:kv_row + TILE, C + h * TILE:C + (h + 1) * TILE])
        v = bf16_bits_to_f32(host[kv_row:kv_row + TILE, 2 * C + h * TILE:2 * C + (h + 1) * TILE])
        s_ref = np.matmul(q, k.T)   # float32 products and sums, another order
        kern = self.mod.get_function("wgmma_qk_pv")
        found, scores_checked = None, False
        for v_lbo, v_sbo in V_STRIDES_TRIED:
            s_out, o_out = cp.zeros(TILE * TILE, cp.float32), cp.zeros(TILE * TILE, cp.float32)
            p_out, descs, status = cp.zeros(TILE * TILE, cp.uint16), cp.zeros(9, cp.uint64), cp.zeros(1, cp.int32)
            arg, keep = self.param(form, tmap)
            kern((1,), (128,), (arg, np.int32(q_row), np.int32(h * TILE), np.int32(kv_row), np.int32(C + h * TILE),
                                np.int32(2 * C + h * TILE), np.uint32(v_lbo), np.uint32(v_sbo), s_out, p_out, o_out, descs,
                                status), shared_mem=5 * TILE_BYTES + 1024)
            cp.cuda.runtime.deviceSynchronize()
            st = int(status.get()[0])
            s = cp.asnumpy(s_out).reshape(TILE, TILE)
            p_bits = cp.asnumpy(p_out).reshape(TILE, TILE)
            o = cp.asnumpy(o_out).reshape(TILE, TILE)
            d = [int(x) for x in cp.asnumpy(descs)]
            aq, ak, av = d[6], d[7], d[8]
            want_d = [wgmma_desc(aq, *K_MAJOR_STRIDES), wgmma_desc(aq + 32, *K_MAJOR_STRIDES), wgmma_desc(ak, *K_MAJOR_STRIDES),
                      wgmma_desc(ak + 32, *K_MAJOR_STRIDES), wgmma_desc(av, v_lbo, v_sbo), wgmma_desc(av + 2048, v_lbo, v_sbo)]
            if not scores_checked:   # the scores do not depend on v's strides: once
                scores_checked = True
                e_s = rel_err(s, s_ref)
                self.record("wgmma S=QK^T 128B K-major", st == 0 and e_s <= 1e-5, rel_err=f"{e_s:.2e}",
                            rel_err_vs_f64=f"{rel_err(s, q.astype(np.float64) @ k.T.astype(np.float64)):.2e}",
                            max_abs_s=float(np.abs(s_ref).max()), status=STATUS.get(st, st))
                self.record("descriptors device == wgmma_desc()", d[:6] == want_d, smem=[hex(aq), hex(ak), hex(av)],
                            device=[hex(x) for x in d[:6]], host=[hex(x) for x in want_d])
                p_want = f32_to_bf16_bits(s)
                self.record("P = bf16(S) in registers", np.array_equal(p_bits, p_want), mismatches=int((p_bits != p_want).sum()))
            o_ref = np.matmul(bf16_bits_to_f32(p_bits), v)
            e_o = rel_err(o, o_ref)
            ok = st == 0 and e_o <= 1e-5
            self.record(f"wgmma O=PV 128B MN-major v_lbo={v_lbo} v_sbo={v_sbo}", ok, rel_err=f"{e_o:.2e}",
                        max_abs_o=float(np.abs(o_ref).max()), status=STATUS.get(st, st))
            if ok:
                found = [v_lbo, v_sbo]
                break
        return {"v_strides": found}

    # ------------------------------------------------------------------ part 4
    def part_tput(self, form: str, v_strides) -> dict:
        cp = self.cp
        B, T, H = 8, 1024, 12
        rows, cols = B * T, 3 * H * TILE
        dev = cp.asarray(np.random.default_rng(3).integers(0x3c00, 0x3f80, (rows, cols), dtype=np.uint16))  # bf16 in [0.008, 1)
        tmap = self.encode(dev, rows, cols)
        sms = cp.cuda.Device().attributes["MultiProcessorCount"]
        out = cp.zeros(sms * 256 * 32, cp.float32)
        flops = B * H * T * T * 4 * TILE
        v_lbo, v_sbo = v_strides or V_STRIDES_TRIED[0]
        for stages in (2, 3):
            for reg in (False, True):
                name = f"tput_s{stages}" + ("_reg" if reg else "")
                smem = 2 * TILE_BYTES + stages * 2 * TILE_BYTES + 1024
                status = cp.zeros(1, cp.int32)
                try:
                    kern = self.mod.get_function(name)
                    kern.max_dynamic_shared_size_bytes = smem
                    arg, keep = self.param(form, tmap)
                    args = (arg, np.int32(B), np.int32(T), np.int32(H), np.uint32(v_lbo), np.uint32(v_sbo), out, status)
                    for _ in range(2):
                        kern((sms,), (384,), args, shared_mem=smem)
                    cp.cuda.runtime.deviceSynchronize()
                    n = 20
                    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                    e0.record()
                    for _ in range(n):
                        kern((sms,), (384,), args, shared_mem=smem)
                    e1.record()
                    e1.synchronize()
                    ms = cp.cuda.get_elapsed_time(e0, e1) / n
                    st = int(status.get()[0])
                    finite = bool(cp.isfinite(out).all())
                    self.record(f"throughput {name}", st == 0 and finite, tflops=round(flops / ms / 1e9, 1), ms=round(ms, 4),
                                blocks=sms, smem=smem, status=STATUS.get(st, st), finite=finite,
                                shape=f"B={B} T={T} H={H} hs=64, no softmax")
                except Exception as e:
                    self.record(f"throughput {name}", False, detail=f"{type(e).__name__}: {str(e)[:160]}")
        return {}


# ---------------------------------------------------------------------------------------------- driver
def compile_cubin(path: Path) -> list[str]:
    """The .cu to a cubin for sm_90a with the project's NVRTC options; ptxas's lines (registers, spills) back."""
    from tr2.cupy_side.gpu import cubins
    nvrtc = cubins.Nvrtc()
    cubin = nvrtc.compile(CU_FILE.read_text(), CU_FILE.name, ARCH, ("-Xptxas", "-v"))
    path.write_bytes(cubin)
    lines, fn = [f"NVRTC {nvrtc.version()} ({os.path.basename(nvrtc.path)}), {len(cubin)} bytes"], None
    for line in nvrtc.last_log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            fn = m.group(1)
        elif fn and ("Used" in line or "spill" in line):
            lines.append(f"{fn:18} " + re.sub(r"^ptxas\s+(info\s+:|\.)\s*", "", line.strip()))
        elif "warning" in line.lower():
            lines.append(line.strip())
    return lines


def run_part(args) -> int:
    probe = Probe(args.out, args.cubin)
    if args.part == "map":
        res = probe.part_map()
    elif args.part == "tile":
        res = probe.part_tile(args.form)
    elif args.part == "wgmma":
        res = probe.part_wgmma(args.form)
    else:
        res = probe.part_tput(args.form, [int(x) for x in args.v_strides.split(",")] if args.v_strides else None)
    print("RESULT " + json.dumps(res), flush=True)
    return 0


def child(args, part: str, extra: list[str], timeout: float) -> dict | None:
    cmd = [sys.executable, __file__, "--part", part, "--out", args.out, "--cubin", args.cubin, *extra]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        sys.stdout.write((e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""))
        print(f"FAIL part {part}: no result within {timeout:.0f} s (killed)", flush=True)
        return None
    res = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
        else:
            print(line, flush=True)
    if p.returncode or res is None:
        print(f"FAIL part {part}: exit {p.returncode}; stderr tail: {p.stderr.strip()[-600:]}", flush=True)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "tma_wgmma_probe.jsonl"))
    ap.add_argument("--skip-tput", action="store_true", help="leave out part 4 (the throughput loops)")
    ap.add_argument("--part", choices=("map", "tile", "wgmma", "tput"), help=argparse.SUPPRESS)
    ap.add_argument("--cubin", help=argparse.SUPPRESS)
    ap.add_argument("--form", default="", help=argparse.SUPPRESS)
    ap.add_argument("--v-strides", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.part:
        return run_part(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("")
    with tempfile.TemporaryDirectory() as tmp:
        args.cubin = os.path.join(tmp, "tma_wgmma_probe.cubin")
        t0 = time.perf_counter()
        try:
            info = compile_cubin(Path(args.cubin))
        except Exception as e:
            print(f"FAIL compile: {e}", flush=True)
            return 1
        print(f"compiled in {time.perf_counter() - t0:.1f} s:\n  " + "\n  ".join(info), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps({"probe": "compile", "pass": True, "ptxas": info}) + "\n")
        res = child(args, "map", [], 60) or {}
        forms = res.get("forms") or []
        form = forms[0] if forms else ""
        print(f"tensor map passed by value as: {form or 'none (the global-memory form only)'}", flush=True)
        child(args, "tile", ["--form", form], 60)
        if not form:
            print("FAIL wgmma, tput: they take the map as a parameter and no form worked", flush=True)
            return 1
        res = child(args, "wgmma", ["--form", form], 60) or {}
        vs = res.get("v_strides")
        if not args.skip_tput:
            child(args, "tput", ["--form", form] + (["--v-strides", ",".join(map(str, vs))] if vs else []), 120)
    print(f"lines in {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
