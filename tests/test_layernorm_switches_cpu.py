"""gpu/layernorm.py's choice of backward kernel under its switches, checked without a GPU (a pure function of the
module's settings; the module is imported over a stand-in CuPy: conftest's over_stand_in_cupy)."""
import pytest


@pytest.fixture
def layernorm(over_stand_in_cupy):
    return over_stand_in_cupy("tr2.cupy_side.gpu.layernorm")


def test_the_defaults_take_the_plain_register_rows(layernorm):
    assert layernorm.BWD_BLOCKS == 2 and not layernorm.PREFETCH_SKIP
    for C in (384, 768, 1024):
        assert layernorm._rows_kernel("residual_layernorm_backward", C) == f"residual_layernorm_backward_c{C}"
        assert layernorm._rows_kernel("layernorm_backward", C) == f"layernorm_backward_c{C}"
    assert layernorm._rows_kernel("residual_layernorm_backward", 1000) == "residual_layernorm_backward"


def test_three_blocks_where_built_and_only_for_the_residual_backward(layernorm, monkeypatch):
    monkeypatch.setattr(layernorm, "BWD_BLOCKS", 3)
    assert layernorm._rows_kernel("residual_layernorm_backward", 768) == "residual_layernorm_backward_c768_o3"
    assert layernorm._rows_kernel("residual_layernorm_backward", 1024) == "residual_layernorm_backward_c1024_o3"
    assert layernorm._rows_kernel("residual_layernorm_backward", 384) == "residual_layernorm_backward_c384"
    assert layernorm._rows_kernel("residual_layernorm_backward_dwsum", 768) == "residual_layernorm_backward_dwsum_c768"
    assert layernorm._rows_kernel("layernorm_backward", 768) == "layernorm_backward_c768"
    assert layernorm._rows_kernel("residual_layernorm_forward", 768) == "residual_layernorm_forward_c768"


def test_prefetch_and_three_blocks_together_are_refused(layernorm, monkeypatch):
    monkeypatch.setattr(layernorm, "BWD_BLOCKS", 3)
    monkeypatch.setattr(layernorm, "PREFETCH_SKIP", True)
    with pytest.raises(ValueError, match="TR2_LN_BWD_PREFETCH=1 and TR2_LN_BWD_BLOCKS=3"):
        layernorm._rows_kernel("residual_layernorm_backward", 768)
    monkeypatch.setattr(layernorm, "BWD_BLOCKS", 2)
    assert layernorm._rows_kernel("residual_layernorm_backward", 768) == "residual_layernorm_backward_c768_pf"


def test_the_three_block_kernels_are_in_the_source():
    from pathlib import Path
    src = (Path(__file__).resolve().parents[1] / "lib/tr2/cupy_side/kernels/residual_layernorm.cu").read_text()
    for C in (768, 1024):
        assert f"RESIDUAL_LAYERNORM_BACKWARD_ROWS_O3({C})" in src


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
    monkeypatch.setattr(layernorm, "FINAL_IN_KERNEL", True)
    assert not layernorm._bulk_rows("residual_layernorm_backward", 768, rows)     # dw summed in the kernel: not built
    monkeypatch.setattr(layernorm, "FINAL_IN_KERNEL", False)
    for switch, value in (("PREFETCH_SKIP", True), ("BWD_BLOCKS", 3)):
        monkeypatch.setattr(layernorm, switch, value)
        monkeypatch.delenv("TR2_LN_BWD_BULK", raising=False)   # on by default: the form named by its switch runs
        assert not layernorm._bulk_rows("residual_layernorm_backward", 768, rows)
        monkeypatch.setenv("TR2_LN_BWD_BULK", "1")              # both named: refused
        with pytest.raises(ValueError, match="TR2_LN_BWD_BULK=1 and TR2_LN_BWD_PREFETCH=1 / TR2_LN_BWD_BLOCKS=3"):
            layernorm._bulk_rows("residual_layernorm_backward", 768, rows)
        monkeypatch.undo()
        monkeypatch.setattr(layernorm, "BWD_BULK", 1)


def test_the_bulk_kernels_are_in_the_source(layernorm):
    from pathlib import Path
    src = (Path(__file__).resolve().parents[1] / "lib/tr2/cupy_side/kernels/residual_layernorm.cu").read_text()
    for C in (384, 768, 1024):
        assert f"RESIDUAL_LAYERNORM_BACKWARD_ROWS_BULK({C})" in src
    assert f"#define LN_BULK_MAX_STAGES {layernorm.BULK_MAX_STAGES}\n" in src   # the ring's barriers, sized here
