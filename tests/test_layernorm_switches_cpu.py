"""gpu/layernorm.py's choice of backward kernel under its switches, checked without a GPU (a pure function of the
module's settings; the module is imported over a stand-in CuPy: conftest's over_stand_in_cupy)."""
import pytest


@pytest.fixture
def layernorm(over_stand_in_cupy):
    return over_stand_in_cupy("tr2.cupy_side.gpu.layernorm")


def test_the_register_rows_at_the_models_widths(layernorm):
    for C in (384, 768, 1024):
        assert layernorm._rows_kernel("residual_layernorm_backward", C) == f"residual_layernorm_backward_c{C}"
        assert layernorm._rows_kernel("layernorm_backward", C) == f"layernorm_backward_c{C}"
        assert layernorm._rows_kernel("residual_layernorm_forward", C) == f"residual_layernorm_forward_c{C}"
    assert layernorm._rows_kernel("residual_layernorm_backward", 1000) == "residual_layernorm_backward"
    assert layernorm.register_rows   # on by default: the general body only where a test switches it off


def test_the_removed_backward_forms_are_gone():
    """The prefetching (_pf), three-block (_o3) and dw-finishing (*_dwsum) backward forms were removed (measured:
    gpu.RETIRED): no kernel of theirs is left in the sources, and the module has no switch of theirs."""
    from pathlib import Path
    kernels = Path(__file__).resolve().parents[1] / "lib/tr2/cupy_side/kernels"
    for name in ("layernorm.cu", "residual_layernorm.cu", "layernorm_backward.cuh"):
        src = (kernels / name).read_text()
        code = "\n".join(line.split("//", 1)[0] for line in src.splitlines())
        for gone in ("_ROWS_O3", "_ROWS_PF", "_dwsum", "PREFETCH_SKIP", "layernorm_dw_finish", "LN_DW_"):
            assert gone not in code, (name, gone)


def test_the_bulk_form_is_on_by_default_and_sized_to_shared_memory(layernorm):
    assert layernorm.BWD_BULK == 1
    # a stage: eight rows of s (float32), dskip (float32, when given) and dy, the eight means and rstds; beside the
    # ring dw's eight rows, w and the barriers
    assert layernorm.bulk_stages(768, 2, True) == 3          # 3 x 61504 + 24576 + 3072 + 24 <= 227 KB; 4 do not fit
    assert layernorm.bulk_stages(768, 4, True) == 2
    assert layernorm.bulk_stages(1024, 2, True) == 2
    assert layernorm.bulk_stages(1024, 4, True) == 0         # 2 x 98368 + 32768 + 4096 + 16 > 227 KB: the plain kernel
    # at 384 two blocks an SM, each in half of its 228 KB less the driver's 1 KB: 3 x 30784 + 12288 + 1536 + 24
    assert layernorm.BULK_BLOCKS[384] == 2 and layernorm.bulk_limit(384) == 114 * 1024 - 1024
    assert layernorm.bulk_stages(384, 2, True) == 3
    assert layernorm.bulk_stages(384, 2, True, limit=layernorm.BULK_SHARED_LIMIT) == layernorm.BULK_MAX_STAGES
    assert layernorm.bulk_stages(768, 2, False) == 4         # no dskip: 8 x 768 x 6 bytes a stage
    assert layernorm.bulk_stages(1024, 4, True, limit=200 * 1024) == 0   # fewer than two stages: the plain kernel
    for C, size, skip in ((384, 2, True), (768, 2, True), (768, 4, False), (1024, 2, True), (1024, 4, True), (384, 4, False)):
        n, limit = layernorm.bulk_stages(C, size, skip), layernorm.bulk_limit(C)
        static = 4 * C   # w
        if n == 0:
            assert static + layernorm.bulk_shared_bytes(C, size, skip, 2) > limit
            continue
        assert static + layernorm.bulk_shared_bytes(C, size, skip, n) <= limit
        if n < layernorm.BULK_MAX_STAGES:
            assert static + layernorm.bulk_shared_bytes(C, size, skip, n + 1) > limit
        blocks = layernorm.BULK_BLOCKS[C]   # the SM holds that many blocks, the driver's 1 KB each beside them
        assert blocks * (static + layernorm.bulk_shared_bytes(C, size, skip, n) + 1024) <= layernorm.BULK_SM_SHARED


class _Rows:
    """A stand-in for a CuPy array: its contiguity and its address, all _bulk_rows asks."""
    def __init__(self, ptr, contiguous=True):
        self.flags = type("Flags", (), {"c_contiguous": contiguous})()
        self.data = type("Data", (), {"ptr": ptr})()


def test_the_bulk_form_takes_only_aligned_contiguous_rows_of_the_residual_backward(layernorm, monkeypatch):
    rows = (_Rows(4096), None, _Rows(8192), _Rows(512), _Rows(1024))
    monkeypatch.setattr(layernorm, "BWD_BULK", 0)
    assert not layernorm._bulk_rows("residual_layernorm_backward", 768, rows)     # off
    monkeypatch.setattr(layernorm, "BWD_BULK", 2)                                # every width built, 384 too
    assert all(layernorm._bulk_rows("residual_layernorm_backward", C, rows) for C in (384, 768, 1024))
    monkeypatch.setattr(layernorm, "BWD_BULK", 1)
    assert layernorm._bulk_rows("residual_layernorm_backward", 768, rows)
    assert layernorm._bulk_rows("residual_layernorm_backward", 768, (_Rows(4096), _Rows(256), *rows[2:]))
    assert not layernorm._bulk_rows("residual_layernorm_backward", 1000, rows)    # no register-row width
    assert layernorm.BULK_SIZES == (768, 1024)
    assert layernorm._bulk_rows("residual_layernorm_backward", 1024, rows)
    assert not layernorm._bulk_rows("residual_layernorm_backward", 384, rows)     # built, slower: not taken
    assert not layernorm._bulk_rows("layernorm_backward", 768, rows)              # the plain LayerNorm's: not built
    for k in (0, 2, 3, 4):   # s, dy, mean, rstd: each misaligned, then each not contiguous
        assert not layernorm._bulk_rows("residual_layernorm_backward", 768, rows[:k] + (_Rows(4104),) + rows[k + 1:])
        assert not layernorm._bulk_rows("residual_layernorm_backward", 768,
                                        rows[:k] + (_Rows(4096, False),) + rows[k + 1:])
    assert not layernorm._bulk_rows("residual_layernorm_backward", 768, (rows[0], _Rows(4100), *rows[2:]))


def test_the_bulk_kernels_are_in_the_source(layernorm):
    from pathlib import Path
    src = (Path(__file__).resolve().parents[1] / "lib/tr2/cupy_side/kernels/residual_layernorm.cu").read_text()
    for C in (384, 768, 1024):
        assert f"RESIDUAL_LAYERNORM_BACKWARD_ROWS_BULK({C})" in src
    assert f"#define LN_BULK_MAX_STAGES {layernorm.BULK_MAX_STAGES}\n" in src   # the ring's barriers, sized here
