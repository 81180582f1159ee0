import os

import pytest


def test_the_named_commit_wins_over_the_trees_git(monkeypatch):
    """The GPU machine's copy may hold a stale .git: TR2_GIT_COMMIT, when set, is what gets recorded."""
    from tr2 import sysinfo
    monkeypatch.setenv("TR2_GIT_COMMIT", "5d5ad50bfb78ffb5a833deeb7052c1ebd4196f64")
    monkeypatch.setenv("TR2_GIT_DIRTY", "false")
    assert sysinfo.git_commit() == {"commit": "5d5ad50bfb78ffb5a833deeb7052c1ebd4196f64", "dirty": False}
    monkeypatch.delenv("TR2_GIT_COMMIT")
    here = sysinfo.git_commit()
    assert here["commit"] is None or len(here["commit"]) == 40


def test_the_machine_record_names_the_tr2_variables_set(monkeypatch):
    """A stage's machine.json says which TR2_* variables were set (kernel switches such as TR2_GELU_F16_FAST=0 change
    what a run measures), and nothing else of the environment; none set, an empty mapping."""
    from tr2 import sysinfo
    for k in [k for k in os.environ if k.startswith("TR2_")]:
        monkeypatch.delenv(k)
    assert sysinfo.tr2_environment() == {}
    monkeypatch.setenv("TR2_GELU_F16_FAST", "0")
    monkeypatch.setenv("TR2_CE_GRAD_EX2", "0")
    monkeypatch.setenv("NOT_TR2_X", "1")
    assert sysinfo.tr2_environment() == {"TR2_CE_GRAD_EX2": "0", "TR2_GELU_F16_FAST": "0"}
    assert list(sysinfo.tr2_environment()) == ["TR2_CE_GRAD_EX2", "TR2_GELU_F16_FAST"]
    monkeypatch.setattr(sysinfo, "gpu_info", lambda: [])
    assert sysinfo.machine_info()["tr2_environment"] == {"TR2_CE_GRAD_EX2": "0", "TR2_GELU_F16_FAST": "0"}


def test_the_sampler_reads_the_energy_counter_where_the_driver_has_one():
    """GpuSampler's samples carry energy_mj (NVML's counter, for a window's mean power: tr2.series.counter_watts), None
    where the driver has no counter; a sample is still taken."""
    from types import SimpleNamespace

    from tr2.sysinfo import GpuSampler

    def nvml(energy):
        def counter(_h):
            if energy is None:
                raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
            return energy
        return SimpleNamespace(
            NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1, NVML_TEMPERATURE_GPU=0,
            nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=1 << 30),
            nvmlDeviceGetClockInfo=lambda h, k: 1980 if k == 0 else 3201,
            nvmlDeviceGetTemperature=lambda h, k: 40, nvmlDeviceGetPowerUsage=lambda h: 690_000,
            nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=99),
            nvmlDeviceGetTotalEnergyConsumption=counter)

    for energy in (123_456_789, None):
        s = GpuSampler.__new__(GpuSampler)
        s._nvml, s._handle = nvml(energy), object()
        sample = s._sample()
        assert sample["energy_mj"] == energy and sample["power_w"] == 690.0 and sample["sm_mhz"] == 1980


def test_the_gpus_are_read_with_their_uuids():
    """Which machine a stage ran on: nvidia-smi's UUID beside name, driver, memory and clock (the device tool lends
    another machine to a later call); a line of other fields is left out, not misread."""
    from tr2.sysinfo import parse_gpu_lines
    text = ("NVIDIA H200, 580.159.04, 143771, 1980, GPU-32998b6d-4502-c305-1489-667dc0cbc29d\n"
            "NVIDIA H200, 580.159.04, 143771, 1980\n")
    assert parse_gpu_lines(text) == [{"name": "NVIDIA H200", "driver": "580.159.04", "memory_mib": "143771",
                                      "max_sm_mhz": "1980", "uuid": "GPU-32998b6d-4502-c305-1489-667dc0cbc29d"}]
    assert parse_gpu_lines("") == []


def test_a_mark_is_filed_at_the_stamp_it_was_asked_for():
    """GpuSampler.mark: a sample read now, filed at the clock's stamp t, with how long after t it was read and its
    tags; None on a machine without NVML."""
    import time
    from types import SimpleNamespace

    from tr2.sysinfo import GpuSampler
    s = GpuSampler.__new__(GpuSampler)
    s.samples, s.available, s._handle = [], True, object()
    s._nvml = SimpleNamespace(
        NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1, NVML_TEMPERATURE_GPU=0,
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=1 << 30),
        nvmlDeviceGetClockInfo=lambda h, k: 1980 if k == 0 else 3201,
        nvmlDeviceGetTemperature=lambda h, k: 40, nvmlDeviceGetPowerUsage=lambda h: 690_000,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=99),
        nvmlDeviceGetTotalEnergyConsumption=lambda h: 123_456)
    t = time.monotonic() - 0.01
    m = s.mark(t, mark=400)
    assert m is s.samples[-1] and m["t"] == t and m["mark"] == 400 and m["energy_mj"] == 123_456
    assert 0.01 <= m["read_lag_s"] < 5
    s.available = False
    assert s.mark(t, mark=100) is None and len(s.samples) == 1


def test_lib_digest_is_of_the_sources_and_matches_the_commits(tmp_path):
    """The digest covers lib/tr2's .py, .cu and .cuh files by path and content (caches left out), and a commit's digest
    (git archive) equals the working tree's where the tree is that commit."""
    import subprocess

    from tr2 import sysinfo
    base = tmp_path / "lib" / "tr2"
    (base / "kernels").mkdir(parents=True)
    (base / "a.py").write_text("x = 1\n")
    (base / "kernels" / "k.cu").write_text("// k\n")
    first = sysinfo.lib_digest(tmp_path)
    assert len(first) == 16
    (base / "__pycache__").mkdir()
    (base / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (base / "notes.txt").write_text("not a source")
    assert sysinfo.lib_digest(tmp_path) == first
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(git + ["add", "lib/tr2/a.py", "lib/tr2/kernels/k.cu"], cwd=tmp_path, check=True)
    subprocess.run(git + ["commit", "-q", "-m", "one"], cwd=tmp_path, check=True)
    assert sysinfo.commit_lib_digest("HEAD", tmp_path) == first
    (base / "kernels" / "k.cu").write_text("// k changed\n")
    assert sysinfo.lib_digest(tmp_path) != first and sysinfo.commit_lib_digest("HEAD", tmp_path) == first
    (base / "kernels" / "k.cu").write_text("// k\n")
    (base / "kernels" / "k.cu").rename(base / "k.cu")   # the same content at another path: another program layout
    assert sysinfo.lib_digest(tmp_path) != first
    assert sysinfo.lib_digest(tmp_path / "none") is None
    with pytest.raises(ValueError, match="commit 'nope'"):
        sysinfo.commit_lib_digest("nope", tmp_path)


def test_lib_digest_command_line(capsys):
    from tr2 import sysinfo
    assert sysinfo.main(["lib-digest"]) == 0 and len(capsys.readouterr().out.strip()) == 16
    assert sysinfo.main(["digest"]) == 2 and "usage: python -m tr2.sysinfo lib-digest" in capsys.readouterr().err
    assert sysinfo.main(["lib-digest", "no-such-commit"]) == 2 and "sysinfo: commit" in capsys.readouterr().err
