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
