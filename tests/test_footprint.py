"""tr2.footprint: /proc/<pid>/maps parsing, NVIDIA's libraries and NVRTC, the bytes by category, a real run."""
import json
import sys

import pandas as pd
import pytest

import tr2.footprint as fp
from tr2 import explore
from tr2.configs import RunConfig
from tr2.results import append_jsonl, write_json_atomic, write_yaml_atomic

MAPS = """\
55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1234  /usr/local/bin/python3.12
7f0000000000-7f0000021000 rw-p 00000000 00:00 0
7f1000000000-7f1000200000 r-xp 00000000 08:01 2001  /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
7f1000200000-7f1000300000 r--p 00200000 08:01 2001  /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
7f1100000000-7f1100100000 r-xp 00000000 08:01 3001  /opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublasLt.so.13
7f1200000000-7f1200100000 r-xp 00000000 08:01 3002  /opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13
7f1300000000-7f1300100000 r-xp 00000000 08:01 3003  /opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13
7f1310000000-7f1310100000 r-xp 00000000 08:01 3004  /opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc-builtins.so.13.0
7f1400000000-7f1400100000 r-xp 00000000 08:01 3005  /opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13
7f1500000000-7f1500100000 r-xp 00000000 08:01 3006  /opt/venv/lib/python3.12/site-packages/cupy/_core/core.cpython-312-x86_64-linux-gnu.so
7f1600000000-7f1600100000 r-xp 00000000 08:01 3007  /opt/venv/lib/python3.12/site-packages/cupy_backends/cuda/libs/cublas.cpython-312-x86_64-linux-gnu.so
7f1700000000-7f1700100000 r-xp 00000000 08:01 3008  /usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.580.159.04
7f1800000000-7f1800100000 r-xp 00000000 08:01 3009  /usr/lib/x86_64-linux-gnu/libc.so.6
7f1900000000-7f1900100000 r-xp 00000000 08:01 3010  /tmp/dir with space/libcudnn_graph.so.9 (deleted)
7f1a00000000-7f1a00100000 r-xp 00000000 08:01 3011  /opt/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvJitLink.so.13
7f1b00000000-7f1b00100000 r--p 00000000 08:01 3012  /usr/share/locale/locale-archive
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
7ffd10000000-7ffd10002000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
"""


def test_parse_maps_lists_each_library_once_in_order():
    libs = fp.parse_maps(MAPS)
    assert libs[0] == "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04"
    assert len(libs) == len(set(libs)) == 12
    assert "/tmp/dir with space/libcudnn_graph.so.9" in libs          # spaces kept, ' (deleted)' cut
    assert not any(lib.endswith(("python3.12", "locale-archive")) or "[" in lib for lib in libs)


def test_nvidia_libraries_named_and_driver_told_apart():
    libs = fp.parse_maps(MAPS)
    assert fp.nvidia_libraries(libs) == sorted(["libcuda", "libcublasLt", "libcublas", "libnvrtc", "libnvrtc-builtins",
                                                "libcudart", "libnvidia-ptxjitcompiler", "libcudnn_graph", "libnvJitLink"])
    assert fp.nvidia_kind("/usr/lib/x86_64-linux-gnu/libcuda.so.1") == "driver"
    assert fp.nvidia_kind("/usr/lib/libnvidia-ml.so.1") == "driver"
    assert fp.nvidia_kind("/x/libcublasLt.so.13") == "library"
    assert fp.nvidia_kind("/x/site-packages/nvidia/cu13/lib/libcufile_rdma.so.1") == "library"
    # CuPy's own extension modules are not NVIDIA's libraries, nor is the C library
    assert fp.nvidia_kind("/x/site-packages/cupy_backends/cuda/libs/cublas.cpython-312-x86_64-linux-gnu.so") is None
    assert fp.nvidia_kind("/usr/lib/x86_64-linux-gnu/libc.so.6") is None
    assert fp.library_name("/a/libnvrtc-builtins.so.13.0") == "libnvrtc-builtins"
    assert fp.library_name("/a/libcublasLt.so") == "libcublasLt"


def test_nvrtc_detection():
    libs = fp.parse_maps(MAPS)
    assert fp.nvrtc_opened(libs)
    without = [lib for lib in libs if "nvrtc" not in lib]
    assert not fp.nvrtc_opened(without)
    assert not fp.nvrtc_opened(fp.parse_maps("7f00-7f01 r-xp 0 08:01 1 /usr/lib/libcublasLt.so.13\n"))


def test_maps_poller_reads_a_live_process():
    import subprocess
    proc = subprocess.Popen([sys.executable, "-c", "import time, json; time.sleep(1.0)"])
    with fp.MapsPoller(proc.pid) as poller:
        proc.wait()
    libs = poller.all_libraries()
    assert poller.polls >= 1 and any(fp.library_name(lib).startswith(("libc", "libpython")) for lib in libs)
    assert fp.nvidia_libraries(libs) == [] and not fp.nvrtc_opened(libs)


def test_configurations_follow_the_card():
    card = {"models": ["nanogpt", "gpt2-small"], "dtypes": ["float32", "bfloat16", "float16"],
            "torch_modes": ["eager", "default", "reduce-overhead", "max-autotune"], "half_roundings": [False, True]}
    cs = fp.configurations(card)
    assert {c.model for c in cs} == {"nanogpt"}        # the card's first model
    cupy = [c for c in cs if c.side == "cupy"]
    assert [(c.dtype, c.half_roundings) for c in cupy] == [("float32", False), ("bfloat16", True), ("float16", True)]
    assert len([c for c in cs if c.side == "torch"]) == 12
    assert len({c.key for c in cs}) == len(cs)
    argv = fp.train_argv(cupy[1], "cuda")
    assert "--half-roundings" in argv and "--mode" not in argv


def test_install_set_closure_and_missing():
    s = fp.install_set(["pyyaml", "no-such-distribution-tr2"])
    assert [d["distribution"] for d in s["distributions"]] == ["PyYAML"]
    assert s["bytes"] > 0 and s["missing"] == ["no-such-distribution-tr2"]
    interp = fp.interpreter_install()
    assert interp["bytes"] > 1_000_000 and interp["files"] > 100


def test_docker_detection_answers_without_raising():
    ok, message = fp.docker_available(timeout_s=20)
    assert isinstance(ok, bool) and message


def _record(side, dtype, mode, nvidia, nvrtc, nbytes):
    return {"key": f"{side}-tiny-{dtype}" + (f"-{mode}" if mode else ""), "side": side, "model": "tiny", "dtype": dtype,
            "mode": mode, "half_roundings": False, "status": "ok", "returncode": 0, "wall_s": 1.0, "polls": 3,
            "last_loss": 4.0, "libraries": [{"name": n, "path": f"/x/{n}.so", "nvidia": "library", "process": "main"}
                                            for n in nvidia],
            "nvidia_libraries": nvidia, "nvrtc": nvrtc, "modules": 10,
            "bytes": {c: nbytes for c in fp.CATEGORIES}, "total_bytes": 5 * nbytes, "image_bytes": 4 * nbytes,
            "distributions": [{"distribution": "numpy", "version": "2", "bytes": nbytes}], "log": "logs/x.log"}


def test_summarize_writes_csv_and_sides(tmp_path):
    write_yaml_atomic(tmp_path / "card.yaml", {"card": "t", "machine": "m", "device": "cuda"})
    write_json_atomic(tmp_path / "machine.json", {"date": "2026-11-29", "commit": "abc", "dirty": False})
    append_jsonl(tmp_path / "footprint.jsonl", _record("cupy", "float32", None, ["libcublas", "libnvrtc"], True, 10))
    append_jsonl(tmp_path / "footprint.jsonl", _record("torch", "float32", "eager", ["libcublas", "libcudnn"], False, 100))
    s = fp.summarize(tmp_path)
    assert s["sides"]["cupy"]["nvrtc"] and not s["sides"]["torch"]["nvrtc"]
    assert s["sides"]["torch"]["nvidia_libraries"] == ["libcublas", "libcudnn"]
    assert s["run_time_set_ratio_torch_to_cupy"] == pytest.approx(10.0)
    table = explore.footprint(tmp_path)["footprint"]  # what the notebooks and the report read
    assert list(table["nvrtc"]) == ["yes", "no"]
    assert list(table["bytes_total"]) == [50, 500]
    assert "libnvrtc" in (tmp_path / "libraries.csv").read_text()
    assert json.loads((tmp_path / "summary.json").read_text())["conditions"]["commit"] == "abc"


@pytest.mark.slow
def test_real_footprint_of_a_cpu_run(tmp_path):
    """One short run of the torch side on the CPU, traced: no NVIDIA library, no NVRTC, bytes by category."""
    pytest.importorskip("torch")
    c = RunConfig("tiny", "float32", "torch", mode="eager")
    rec = fp.measure(c, tmp_path, "cpu", timeout_s=300)
    assert rec["status"] == "ok", (tmp_path / rec["log"]).read_text()[-2000:]
    names = {lib["name"] for lib in rec["libraries"]}
    assert "libtorch_cpu" in names and any(n.startswith("libc") for n in names)
    assert rec["nvidia_libraries"] == [] and rec["nvrtc"] is False
    b = rec["bytes"]
    assert b["interpreter"] > 0 and b["python_packages"] > 100_000_000 and b["nvidia_driver"] == 0
    assert rec["total_bytes"] == sum(b.values())
    # the file list, compressed as written (it is a GPU run's largest raw output), and its sizes add up
    files = pd.read_csv(tmp_path / rec["files_csv"])
    assert rec["files_csv"].endswith(".csv.gz") and set(files["category"]) <= set(b)
    assert files.groupby("category")["bytes"].sum().to_dict() == {k: v for k, v in b.items() if v}
    dists = {d["distribution"] for d in rec["distributions"]}
    assert {"torch", "numpy", "tr2"} <= dists
    assert rec["polls"] >= 1


def test_a_gz_path_is_written_compressed_and_the_same_text_gives_the_same_bytes(tmp_path):
    import gzip
    from tr2.results import write_text_atomic
    a, b = write_text_atomic(tmp_path / "a.csv.gz", "x,y\n1,2\n"), write_text_atomic(tmp_path / "b.csv.gz", "x,y\n1,2\n")
    assert gzip.decompress(a.read_bytes()) == b"x,y\n1,2\n" and a.read_bytes() == b.read_bytes()
    assert write_text_atomic(tmp_path / "c.csv", "x\n").read_bytes() == b"x\n"   # any other path: plain text


def test_what_compiled_is_read_from_the_cupy_sides_line(tmp_path):
    """A run's NVRTC line (trainlog.nvrtc_line, the cupy side on a GPU) gives the record's nvrtc_compiled; the CSV cell
    and the side's union say it; runs without the line (PyTorch's, older logs) give None, not 'nothing'."""
    from tr2.trainlog import nvrtc_line, parse_nvrtc_line
    assert fp.compiled_modules(None) is None
    assert fp.compiled_modules(parse_nvrtc_line(nvrtc_line(False, [], []))) == []
    assert fp.compiled_modules(parse_nvrtc_line(nvrtc_line(True, ["cupy_copy__float32_float32"], ["attention.cu"]))) == [
        "CuPy:cupy_copy__float32_float32", "tr2:attention.cu"]
    assert fp.compiled_modules(parse_nvrtc_line(nvrtc_line(True, None, []))) == ["CuPy:?"]

    write_yaml_atomic(tmp_path / "card.yaml", {"card": "t", "machine": "m", "device": "cuda"})
    write_json_atomic(tmp_path / "machine.json", {"date": "2026-12-04", "commit": "abc", "dirty": False})
    compiled = (["CuPy:cupy_copy__float32_float32"], [], None)
    for dtype, modules in zip(("float32", "bfloat16", "float16"), compiled):
        append_jsonl(tmp_path / "footprint.jsonl", {**_record("cupy", dtype, None, ["libnvrtc"], True, 10),
                                                    "nvrtc_compiled": modules})
    append_jsonl(tmp_path / "footprint.jsonl", _record("torch", "float32", "eager", ["libcublas"], False, 100))
    s = fp.summarize(tmp_path)
    assert s["sides"]["cupy"]["nvrtc_compiled"] == ["CuPy:cupy_copy__float32_float32"]
    assert s["sides"]["torch"]["nvrtc_compiled"] is None
    assert [r["nvrtc_compiled"] for r in s["runs"]] == [*compiled, None]
    table = pd.read_csv(tmp_path / "footprint.csv", keep_default_na=False)
    assert list(table["nvrtc_compiled"]) == ["CuPy:cupy_copy__float32_float32", "none", "", ""]
