"""The cupy side's account of NVRTC at run time (gpu/nvrtc_watch.py, trainlog.nvrtc_line): what CuPy and tr2 compiled
in the process, and whether libnvrtc is mapped. CPU: the line and its reader, the kernel names, the wrapper over a
stand-in of CuPy's compiler module (it records and passes every call through), the maps test. The GPU test beside it
(tests/test_nvrtc_gpu.py) runs the trainer and asks that nothing compile."""
import sys
import types

import numpy as np

import pytest

from tr2.trainlog import nvrtc_line, parse_nvrtc_line


@pytest.mark.parametrize("mapped, cupy, ours", [
    (False, [], []),
    (True, ["cupy_copy__float32_float32"], []),
    (True, ["a+b", "cupy_fill"], ["attention.cu", "gelu.cu"]),
    (True, None, ["adamw.cu"]),
])
def test_the_line_reads_back(mapped, cupy, ours):
    text = "iter 3: loss 4.0, time 1.00ms\n" + nvrtc_line(mapped, cupy, ours) + "\npeak memory: 10 bytes\n"
    assert parse_nvrtc_line(text) == {"mapped": mapped, "cupy": cupy, "tr2": ours}


def test_no_line_is_none_and_the_last_line_counts():
    assert parse_nvrtc_line("iter 0: loss 4.0, time 1.00ms\npeak memory: 0 bytes\n") is None
    two = nvrtc_line(False, [], []) + "\n" + nvrtc_line(True, ["x"], []) + "\n"
    assert parse_nvrtc_line(two) == {"mapped": True, "cupy": ["x"], "tr2": []}
    assert nvrtc_line(True, ["x"], []).endswith("CuPy compiled 1 module [x]; tr2 compiled 0 modules []")


@pytest.fixture
def watch(over_stand_in_cupy):
    return over_stand_in_cupy("tr2.cupy_side.gpu.nvrtc_watch")


def test_kernel_names_of_a_module(watch):
    src = ('extern "C" __global__ void cupy_copy__float32_float32(const float* a, float* b) {}\n'
           'extern "C" __global__ __launch_bounds__(256, 2) void second(int n) {}\n'
           '__device__ void helper() {}\n__global__ void second(int n);\n')
    assert watch.module_name(src) == "cupy_copy__float32_float32+second"
    assert watch.module_name("int x;") == "unnamed"


def test_the_wrapper_records_each_module_and_passes_the_call_through(watch):
    calls = []

    def compile_with_cache(source, options, arch, *rest, **kw):
        calls.append((source, options, arch, rest, kw))
        return "module"

    compiler = types.SimpleNamespace(_compile_with_cache_cuda=compile_with_cache)
    assert watch.install(compiler) is True
    assert watch.install(types.SimpleNamespace()) is True          # once per process: a second call changes nothing
    src = 'extern "C" __global__ void k1(float* x) {}'
    assert compiler._compile_with_cache_cuda(src, ("-O3",), "90", None, backend="nvrtc") == "module"
    assert calls == [(src, ("-O3",), "90", (None,), {"backend": "nvrtc"})]
    compiler._compile_with_cache_cuda('__global__ void k2() {}', (), "90")
    assert watch._cupy_modules == ["k1", "k2"]


def test_a_cupy_without_the_function_is_said_unwatched(watch, monkeypatch):
    assert watch.install(types.SimpleNamespace()) is False
    monkeypatch.setattr(watch, "libnvrtc_mapped", lambda: True)
    monkeypatch.setattr(watch.cubins, "COMPILED", ["attention.cu"])   # the process's own list: other tests fill it
    assert parse_nvrtc_line(watch.line()) == {"mapped": True, "cupy": None, "tr2": ["attention.cu"]}


def test_libnvrtc_mapped_reads_the_maps(watch, tmp_path):
    maps = tmp_path / "maps"
    base = "7f00-7f01 r-xp 00000000 08:01 3 "
    maps.write_text(base + "/usr/lib/libc.so.6\n" + base + "/x/nvidia/cu13/lib/libcublasLt.so.13\n7f02-7f03 rw-p 0 0 0\n")
    assert watch.libnvrtc_mapped(str(maps)) is False
    maps.write_text(maps.read_text() + base + "/x/site-packages/nvidia/cu13/lib/libnvrtc.so.13 (deleted)\n")
    assert watch.libnvrtc_mapped(str(maps)) is True
    assert isinstance(watch.libnvrtc_mapped(), bool)            # the process's own maps, read


def test_a_module_is_named_with_the_tr2_lines_that_led_to_it(watch, tmp_path):
    root = str(tmp_path / "lib" / "tr2")
    frames = [("/site/cupy/_core/core.py", 10), (root + "/cupy_side/gpu/loss.py", 84), ("/site/cupy/x.py", 3),
              (root + "/cupy_side/model.py", 217), (root + "/cupy_side/train.py", 86), (root + "/train.py", 5)]
    assert watch.callers(frames, root) == "@cupy_side/gpu/loss.py:84<cupy_side/model.py:217<cupy_side/train.py:86"
    assert watch.callers(frames, root, most=1) == "@cupy_side/gpu/loss.py:84"
    assert watch.callers(frames[:1], root) == ""                       # nothing of tr2's on the stack: the name alone
    assert watch.callers([(root + "x/y.py", 1)], root) == ""           # a sibling folder whose name starts alike
    line = nvrtc_line(True, ["cupy_fill" + watch.callers(frames, root)], [])
    assert parse_nvrtc_line(line)["cupy"] == ["cupy_fill@cupy_side/gpu/loss.py:84<cupy_side/model.py:217"
                                               "<cupy_side/train.py:86"]


class _RecordingCuPy:
    """CuPy's array constructor as the backend's to_device calls it: what it was given, and whether a 0-d array was
    asked of it (CuPy fills those, which compiles its fill kernel)."""
    class ndarray:
        def __init__(self, host):
            self.host = host

        def reshape(self, shape):
            return ("view", self.host, shape)

    def __init__(self):
        self.given = []

    def array(self, a, dtype=None, copy=True):
        self.given.append(np.array(a, dtype=dtype))
        return self.ndarray(self.given[-1])


def test_a_number_travels_to_the_device_as_one_element_not_a_filled_0d_array(over_stand_in_cupy, monkeypatch):
    if "cupyx" not in sys.modules:
        monkeypatch.setitem(sys.modules, "cupyx", types.ModuleType("cupyx"))   # gpu/tensors.py imports it at the top
    backend = over_stand_in_cupy("tr2.cupy_side.gpu.backend")
    fake = _RecordingCuPy()
    monkeypatch.setattr(backend, "cp", fake)
    be = types.SimpleNamespace(float_dtype=np.dtype(np.float32))
    assert backend.CudaBackend.to_device(be, 1.0) == ("view", np.array([1.0], dtype=np.float32), ())
    backend.CudaBackend.to_device(be, np.float64(65536.0), dtype=np.float64)
    backend.CudaBackend.to_device(be, np.ones((2, 3)))
    assert [(g.shape, g.dtype) for g in fake.given] == [((1,), np.float32), ((1,), np.float64), ((2, 3), np.float32)]
    assert all(g.ndim >= 1 for g in fake.given)
