"""gpu.kernel_switch: the environment's kernel choices (bench variants such as TR2_ATTN_WG_DKDV=0) read as integers,
the default where unset, and a clear stop for any other value, naming the key, the value and what is allowed."""
from __future__ import annotations

import pytest

from tr2.cupy_side.gpu import kernel_switch


def test_unset_or_empty_gives_the_default(monkeypatch):
    monkeypatch.delenv("TR2_TEST_SWITCH", raising=False)
    assert kernel_switch("TR2_TEST_SWITCH", 1) == 1
    monkeypatch.setenv("TR2_TEST_SWITCH", " ")
    assert kernel_switch("TR2_TEST_SWITCH", 0) == 0


@pytest.mark.parametrize("raw, allowed, value", [("0", (0, 1), 0), ("1", (0, 1), 1), (" 64 ", (128, 64), 64),
                                                 ("2", (0, 1, 2), 2)])
def test_allowed_values_are_read(monkeypatch, raw, allowed, value):
    monkeypatch.setenv("TR2_TEST_SWITCH", raw)
    assert kernel_switch("TR2_TEST_SWITCH", allowed[0], allowed) == value


@pytest.mark.parametrize("raw, allowed", [("yes", (0, 1)), ("2", (0, 1)), ("1.0", (0, 1)), ("32", (128, 64))])
def test_other_values_stop_naming_key_value_and_choices(monkeypatch, raw, allowed):
    monkeypatch.setenv("TR2_TEST_SWITCH", raw)
    with pytest.raises(ValueError) as e:
        kernel_switch("TR2_TEST_SWITCH", allowed[0], allowed)
    msg = str(e.value)
    assert "TR2_TEST_SWITCH" in msg and repr(raw) in msg
    assert all(str(a) in msg for a in allowed)


def test_a_bad_switch_is_one_line_of_the_trainer(monkeypatch, capsys):
    """A switch's refusal is a Tr2Error (and a ValueError): tr2.train prints it as its one-line error and exits 2,
    where a traceback from deep in an import would otherwise end the run (on the GPU, where the modules read them)."""
    import tr2.train
    from tr2 import Tr2Error
    from tr2.cupy_side.gpu import SwitchError
    monkeypatch.setenv("TR2_TEST_SWITCH", "yes")
    with pytest.raises(SwitchError) as e:
        kernel_switch("TR2_TEST_SWITCH", 1, (1, 2))
    assert isinstance(e.value, Tr2Error) and isinstance(e.value, ValueError)
    monkeypatch.setattr(tr2.train, "run", lambda args: kernel_switch("TR2_TEST_SWITCH", 1, (1, 2)))
    assert tr2.train.main(["--side", "cupy", "--model", "tiny", "--steps", "1"]) == 2
    assert capsys.readouterr().err == "tr2.train: error: TR2_TEST_SWITCH='yes': allowed values are 1, 2\n"
