"""Kernels built ahead (tr2.cupy_side.gpu.cubins): the cache key follows the source and the options, a missing
cubin is compiled once with a notice and kept, and a present one is used without compiling. No GPU needed: the
compiler is replaced by a recorder (the real NVRTC compile runs on the GPU machine and in `make kernels`)."""
from __future__ import annotations

import json

import pytest

from tr2.cupy_side import gpu
from tr2.cupy_side.gpu import cubins


class FakeNvrtc:
    path = "/fake/libnvrtc.so.13"

    def __init__(self):
        self.compiled = []

    def version(self):
        return "13.0"

    def compile(self, source, name, arch):
        self.compiled.append((name, arch))
        return b"CUBIN:" + name.encode() + b":" + arch.encode()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TR2_KERNEL_CACHE", str(tmp_path))
    return tmp_path


def test_key_follows_source_options_and_arch(monkeypatch):
    k = cubins.key("gelu.cu", "sm_90")
    assert k.startswith("gelu-sm_90-") and k.endswith(".cubin")
    assert cubins.key("gelu.cu", "sm_80") != k
    assert cubins.key("residual.cu", "sm_90") != k
    monkeypatch.setattr(cubins, "NVRTC_OPTIONS", cubins.NVRTC_OPTIONS + ("-lineinfo",))
    assert cubins.key("gelu.cu", "sm_90") != k
    real = gpu.load_source
    monkeypatch.setattr(cubins, "load_source", lambda fn: real(fn) + "\n// changed")
    assert cubins.key("gelu.cu", "sm_90") != k


def test_never_fast_math_and_ftz_as_cupy_did():
    assert "-ftz=true" in cubins.NVRTC_OPTIONS
    assert not any("fast" in o for o in cubins.NVRTC_OPTIONS)


def test_missing_cubin_compiled_once_with_a_notice_then_kept(cache, monkeypatch, capsys):
    fake = FakeNvrtc()
    monkeypatch.setattr(cubins, "Nvrtc", lambda *a: fake)
    p = cubins.ensure("gelu.cu", "sm_90")
    assert p.parent == cache and p.read_bytes() == b"CUBIN:gelu.cu:sm_90"
    assert "compiling gelu.cu for sm_90" in capsys.readouterr().err
    meta = json.loads(p.with_suffix(".json").read_text())
    assert meta["nvrtc"] == "13.0" and meta["arch"] == "sm_90" and meta["options"] == list(cubins.NVRTC_OPTIONS)
    assert cubins.ensure("gelu.cu", "sm_90") == p
    assert fake.compiled == [("gelu.cu", "sm_90")]
    assert capsys.readouterr().err == ""
    assert not list(cache.glob("*.tmp"))


def test_build_ahead_compiles_every_file_then_keeps_them(cache, monkeypatch, capsys):
    fake = FakeNvrtc()
    monkeypatch.setattr(cubins, "Nvrtc", lambda *a: fake)
    assert cubins.main(["--arch", "sm_90"]) == 0
    assert sorted(n for n, _ in fake.compiled) == sorted(gpu.kernel_files())
    assert cubins.main(["--arch", "sm_90"]) == 0
    assert len(fake.compiled) == len(gpu.kernel_files())   # the second run compiled nothing
    assert "kept" in capsys.readouterr().out


def test_no_nvrtc_is_its_own_error(monkeypatch):
    """runtime.module falls back to CuPy's own compile on this error (and only this one), so it must be distinct."""
    monkeypatch.setenv("TR2_NVRTC", "")
    monkeypatch.setattr(gpu.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(gpu.ctypes.util, "find_library", lambda name: None)
    monkeypatch.setitem(__import__("sys").modules, "cuda", None)   # no cuda-pathfinder either
    with pytest.raises(cubins.NvrtcNotFound, match="NVRTC not found"):
        cubins.Nvrtc()
    assert issubclass(cubins.NvrtcNotFound, RuntimeError)


def test_the_library_finder_takes_the_library_not_its_side_files(tmp_path, monkeypatch):
    """gpu.find_nvidia_lib, shared by cuBLAS and NVRTC: the variable first, else a wheel's library under
    sys.path (NVRTC's builtins and .alt. builds are not NVRTC), else nothing."""
    lib = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    for name in ("libnvrtc-builtins.so.13.0", "libnvrtc.alt.so.13", "libnvrtc.so.13", "libcublasLt.so.13"):
        (lib / name).write_bytes(b"")
    monkeypatch.setitem(__import__("sys").modules, "cuda", None)
    monkeypatch.setattr(gpu.sys, "path", [str(tmp_path / "site")])
    monkeypatch.setattr(gpu.ctypes.util, "find_library", lambda name: None)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setenv("TR2_NVRTC", "")
    assert gpu.find_nvidia_lib("nvrtc", env="TR2_NVRTC") == str(lib / "libnvrtc.so.13")
    monkeypatch.setenv("TR2_NVRTC", "/opt/mine/libnvrtc.so.12")
    assert gpu.find_nvidia_lib("nvrtc", env="TR2_NVRTC") == "/opt/mine/libnvrtc.so.12"
    assert gpu.find_nvidia_lib("cublas") is None   # libcublasLt is another library


def test_attention_is_built_for_sm90a_on_hopper_only():
    """attention.cu's wgmma kernels need sm_90a: its cubin is built and named so on an sm_90 GPU, and every other
    file, and every other architecture, keeps the GPU's own."""
    assert cubins.target("attention.cu", "sm_90") == "sm_90a"
    assert cubins.key("attention.cu", "sm_90").startswith("attention-sm_90a-")
    assert cubins.target("attention.cu", "sm_80") == "sm_80"
    assert cubins.target("gelu.cu", "sm_90") == "sm_90"
    assert cubins.key("gelu.cu", "sm_90").startswith("gelu-sm_90-")

