"""scripts/device_env.sh's out_fold, run by bash on the CPU: the device tool returns at most 8 files from $OUT, none
deeper than OUT/a/b/file, so a command that leaves more folds them into one tarball and loses nothing."""
import subprocess
import tarfile
from pathlib import Path

import pytest

ENV = Path(__file__).resolve().parent.parent / "scripts" / "device_env.sh"


def fold(tmp_path, out: Path) -> str:
    # sourced in an empty folder: no carried wheels, data or nanoGPT there, so it only defines its functions
    r = subprocess.run(["bash", "-c", f'source "{ENV}" && out_fold "{out}"'], cwd=tmp_path, capture_output=True,
                       text=True, check=True)
    return r.stdout


def files(d: Path) -> list:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())


@pytest.mark.parametrize("names", [["machine.txt", "a.log", "b/results.tgz", "a/b/file.log"], [f"f{i}" for i in range(8)]])
def test_eight_files_or_fewer_stay_as_they_are(tmp_path, names):
    out = tmp_path / "out"
    for n in names:
        (out / n).parent.mkdir(parents=True, exist_ok=True)
        (out / n).write_text(n)
    assert fold(tmp_path, out) == ""
    assert files(out) == sorted(names)


@pytest.mark.parametrize("names", [["machine.txt"] + [f"runs/r{i}.log" for i in range(8)],
                                   ["machine.txt", "a/b/c/deep.log"]])
def test_more_files_or_a_deeper_one_fold_into_one_tarball_beside_machine_txt(tmp_path, names):
    out = tmp_path / "out"
    for n in names:
        (out / n).parent.mkdir(parents=True, exist_ok=True)
        (out / n).write_text(f"content of {n}")
    said = fold(tmp_path, out)
    assert said.startswith(f"out_fold: {len(names)} files under {out}")
    assert files(out) == ["machine.txt", "rest.tgz"]
    with tarfile.open(out / "rest.tgz") as t:
        inside = {m.name.removeprefix("./"): t.extractfile(m).read().decode() for m in t.getmembers() if m.isfile()}
    assert inside == {n: f"content of {n}" for n in names if n != "machine.txt"}
