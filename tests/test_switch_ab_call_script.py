"""scripts/switch_ab_call.sh, the device call that sets a kernel switch off and on in turn, run here without a GPU: a
stand-in `ncu` first on PATH prints a kernel line and a duration that depend on the switch's value, so the table the
script prints must carry each run's round, model and value in the order run; the whole runs go to the CPU (tiny model,
AB_DEVICE=cpu), where off and on must write the same loss lines. A missing AB_SWITCH is refused before anything runs."""
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from tr2 import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "switch_ab_call.sh"
STAND_IN_NCU = """#!/usr/bin/env bash
# prints what ncu prints of one kernel: its name line and its duration, 100 + the switch's value microseconds
echo '==PROF== Profiling "attn_stand_in": 0%....50%....100% - 2 passes'
echo '  attn_stand_in_kernel (96, 8, 1)x(256, 1, 1), Context 1, Stream 7, Device 0, CC 9.0'
echo "    Duration                         us       $((100 + TR2_AB_TEST_SWITCH)).50"
"""


def _env(tmp_path, **extra) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ncu").write_text(STAND_IN_NCU)
    (bin_dir / "ncu").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AB_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"   # python3: ours
    env.update(extra)
    return env


def test_a_missing_switch_is_refused_before_anything_runs(tmp_path):
    p = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], cwd=REPO_ROOT, env=_env(tmp_path),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "AB_SWITCH=<a switch variable>" in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()


def test_the_runs_alternate_off_and_on_and_the_whole_runs_are_compared(tmp_path):
    out = tmp_path / "out"
    env = _env(tmp_path, AB_SWITCH="TR2_AB_TEST_SWITCH", AB_OFF="0", AB_ON="7", AB_KERNEL="attn_",
               AB_NCU="tiny:float32:0", AB_ROUNDS="2", AB_NCU_S="30", AB_BITS="tiny:float32:2", AB_DEVICE="cpu",
               AB_CALL_S="400")
    p = subprocess.run(["bash", str(SCRIPT), str(out)], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [line for line in p.stdout.splitlines() if line.startswith("round ")]
    assert rows == [f"round {r} tiny float32 hr=0 TR2_AB_TEST_SWITCH={v} attn_stand_in_kernel us {100 + v}.50"
                    for r in (1, 2) for v in (0, 7)], p.stdout
    assert "== bits tiny:float32:2: identical, 3 lines" in p.stdout, p.stdout
    with tarfile.open(out / "rest.tgz") as tar:   # out_fold: more than eight files come back as one archive
        durations = tar.extractfile("./durations.txt").read().decode().splitlines()
    assert durations == rows


def _lib_copy(tmp_path, name, edit=None) -> Path:
    """This tree's lib/ and params/ copied as scripts/carry_prepare.sh places a variant's (NAME/lib, NAME/params),
    one file's text replaced where edit = (path under lib/, old, new) is given."""
    import shutil
    d = tmp_path / name
    shutil.copytree(REPO_ROOT / "lib", d / "lib", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO_ROOT / "params", d / "params")
    if edit:
        path, old, new = edit
        text = (d / "lib" / path).read_text()
        assert old in text
        (d / "lib" / path).write_text(text.replace(old, new, 1))
    return d / "lib"


def _data() -> str:
    """The data folder this tree's runs read: a copied lib/ looks beside itself, where no data lies (on the device
    scripts/device_env.sh names the carried data/ in TR2_DATA)."""
    from tr2.data import data_file
    return str(data_file("input.txt").parent)


def test_a_lib_as_the_off_program_gives_identical_runs_where_it_is_this_program(tmp_path):
    out = tmp_path / "out"
    env = _env(tmp_path, AB_LIB_OFF=str(_lib_copy(tmp_path, "off")), TR2_DATA=_data(),
               AB_BITS="tiny:float32:2 tiny:bfloat16:2:hr tiny:float32:2:notf32 tiny:float32:2:7", AB_DEVICE="cpu", AB_CALL_S="300")
    p = subprocess.run(["bash", str(SCRIPT), str(out)], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "tiny float32 lib=off: exit 0" in p.stdout and "tiny float32 lib=on: exit 0" in p.stdout, p.stdout
    assert "== bits tiny:float32:2: identical, 3 lines" in p.stdout, p.stdout
    # the half-roundings build, which the half types' wgmma and TMA kernels serve on the GPU
    assert "tiny bfloat16 --half-roundings lib=off: exit 0" in p.stdout, p.stdout
    assert "== bits tiny:bfloat16:2:hr: identical, 3 lines" in p.stdout, p.stdout
    # plain float32, as method B runs it
    assert "tiny float32 --no-tf32 lib=on: exit 0" in p.stdout, p.stdout
    assert "== bits tiny:float32:2:notf32: identical, 3 lines" in p.stdout, p.stdout
    assert "== bits tiny:float32:2:7: BUILD '7' is not allowed; allowed: hr (--half-roundings), notf32" in p.stdout, p.stdout


def test_a_lib_that_computes_otherwise_is_found_different(tmp_path):
    # the off program's final LayerNorm with another epsilon: other losses, which the comparison must report
    lib = _lib_copy(tmp_path, "other", ("tr2/cupy_side/model.py", "self.cfg.eps_ln)", "self.cfg.eps_ln * 2)"))
    out = tmp_path / "out"
    env = _env(tmp_path, AB_LIB_OFF=str(lib), TR2_DATA=_data(), AB_BITS="tiny:float32:2", AB_DEVICE="cpu", AB_CALL_S="300")
    p = subprocess.run(["bash", str(SCRIPT), str(out)], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert "== bits tiny:float32:2: DIFFER or missing" in p.stdout, p.stdout
    assert "tiny float32 lib=off: exit 0" in p.stdout, p.stdout   # it ran: the difference is in its losses


def test_a_lib_folder_without_tr2_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "empty").mkdir()
    p = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], cwd=REPO_ROOT,
                       env=_env(tmp_path, AB_LIB_OFF=str(tmp_path / "empty")), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and f"AB_LIB_OFF={tmp_path / 'empty'}: no tr2 package there" in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()
