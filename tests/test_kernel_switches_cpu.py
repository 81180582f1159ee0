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


@pytest.mark.parametrize("key", ["TR2_ZERO_BY_KERNEL", "TR2_STEP_GRAPHS", "TR2_ATTN_WG_DKDV_TMA",
                                 "TR2_ATTN_DS_GROUP_BATCHES", "TR2_GELU_F16_TABLE", "TR2_GELU_F16_SEG",
                                 "TR2_LN_FINAL_IN_KERNEL", "TR2_LN_BWD_PREFETCH", "TR2_LN_BWD_BLOCKS", "TR2_CE_SMEM_DB",
                                 "TR2_SIDE_STREAM", "TR2_STREAM_PRIORITY"])
def test_a_retired_switch_set_stops_whichever_switch_is_read(monkeypatch, key):
    """A switch removed with the forms it chose (gpu.RETIRED) must not be ignored: a bench variant that still sets it
    would time the default under its name. Any kernel_switch read stops, naming the key, its value and why; a blank
    value counts as unset, as for every switch."""
    from tr2.cupy_side.gpu import RETIRED, SwitchError
    monkeypatch.delenv("TR2_TEST_SWITCH", raising=False)
    monkeypatch.setenv(key, " ")
    assert kernel_switch("TR2_TEST_SWITCH", 1) == 1
    monkeypatch.setenv(key, "0")
    with pytest.raises(SwitchError) as e:
        kernel_switch("TR2_TEST_SWITCH", 1)
    assert str(e.value) == f"{key}='0': removed with {RETIRED[key]}; unset it"
    assert "\n" not in str(e.value) and "measured" in RETIRED[key]


def test_a_retired_switch_is_one_line_of_the_trainer(monkeypatch, capsys):
    import tr2.train
    monkeypatch.setenv("TR2_ATTN_FWD_WGP", "1")
    monkeypatch.setattr(tr2.train, "run", lambda args: kernel_switch("TR2_TEST_SWITCH", 1, (1, 2)))
    assert tr2.train.main(["--side", "cupy", "--model", "tiny", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tr2.train: error: TR2_ATTN_FWD_WGP='1': removed with the pipelined wgmma forward")
    assert err.endswith("; unset it\n") and err.count("\n") == 1


def test_no_retired_switch_is_read_by_the_program():
    """No module reads a retired name (outside gpu/__init__.py's table none is a string in lib/'s code; comments may
    name them), and no live switch is retired."""
    import re

    from tr2 import REPO_ROOT
    from tr2.cupy_side.gpu import RETIRED
    lib = REPO_ROOT / "lib" / "tr2"
    table = lib / "cupy_side" / "gpu" / "__init__.py"
    live = set()
    for path in lib.rglob("*.py"):
        text = path.read_text()
        live |= set(re.findall(r'kernel_switch\("(TR2_\w+)"', text))
        if path != table:
            code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
            named = [k for k in RETIRED if re.search(rf"[\"']{k}[\"']", code)]
            assert not named, f"{path.relative_to(REPO_ROOT)} names the retired {named}"
    assert live and not live & set(RETIRED)
    assert {"TR2_ZERO_BY_KERNEL", "TR2_STEP_GRAPHS"} <= set(RETIRED)


def test_every_retired_switch_says_what_measured_it():
    """Each reason names the form, that it was measured, and the session of docs/perf.md that measured it."""
    from tr2.cupy_side.gpu import RETIRED
    for key, why in RETIRED.items():
        assert "measured" in why and "session" in why, key
