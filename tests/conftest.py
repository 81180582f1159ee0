"""Fixtures shared by the test files."""
import importlib
import importlib.util
import sys
import types

import pytest


def load_script(path, name: str):
    """A script of scripts/ (not a package) imported as module `name`, for its CPU tests."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cuda_device_present() -> bool:
    """Whether CuPy sees a CUDA device: the condition the GPU test files skip on (`from conftest import ...`)."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: each means no GPU test here
        return False


def memsets_at(monkeypatch, value: int) -> None:
    """gpu/memsets.py as TR2_MEMSET_EARLY=value sets it at import: EARLY and every form derived from it."""
    from tr2.cupy_side.gpu import memsets
    monkeypatch.setattr(memsets, "EARLY", value)
    for name, on in memsets.forms(value).items():
        monkeypatch.setattr(memsets, name, on)


@pytest.fixture
def one_torch_thread():
    """One intra-op thread for the in-process work: the tiny model gains nothing from more, and on a loaded
    2-core machine torch's OpenMP pool spinning against other processes makes it many times slower."""
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def over_stand_in_cupy(monkeypatch):
    """A function that imports a module of the cupy side over a stand-in CuPy module where CuPy is missing (modules
    that import CuPy at the top but touch it only when they launch), for tests of their pure choices; every module
    the imports brought in is dropped again afterwards."""
    before = set(sys.modules)
    if "cupy" not in sys.modules:
        monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    yield importlib.import_module
    for name in set(sys.modules) - before:
        if name != "cupy":
            del sys.modules[name]


def pytest_sessionstart(session):
    """The suite's inputs, checked once before any test: tiny Shakespeare (data.data_dirs: $TR2_DATA, ./data,
    ../shared/data/shakespeare) and nanoGPT's checkout (../shared/nanoGPT). Without them some 70 tests and
    notebook cells each failed on their own (a clone outside the project's folder, 2026-12-01); now one line."""
    from tr2 import Tr2Error, data, trainargs
    try:
        for name in ("input.txt", "train.bin", "val.bin"):
            data.data_file(name)
        trainargs.checkout_path()
    except Tr2Error as e:
        pytest.exit(f"the tests need the data and nanoGPT's checkout (../shared beside the repository): {e}",
                    returncode=2)
