"""scripts/probes/attention_forward_alone_probe.py without a GPU: its quartiles, the kernel durations it reads from a
profiler's events (CUDA kernels only, the flush's fill left out), and its one line and exit 2 where no GPU is."""
import subprocess
import sys
import types
from pathlib import Path

import pytest

from conftest import load_script

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "probes" / "attention_forward_alone_probe.py"


@pytest.fixture
def probe():
    return load_script(SCRIPT, "attention_forward_alone_probe_under_test")


def test_quartiles_of_a_sample_and_of_one_value(probe):
    assert probe.quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (1.5, 3.0, 4.5)
    assert probe.quartiles([7.0]) == (7.0, 7.0, 7.0)


def test_the_durations_are_the_cuda_kernels_by_name_without_the_flush(probe):
    from torch.autograd import DeviceType

    def event(name, device, us, annotation=False):
        return types.SimpleNamespace(name=name, device_type=device, is_user_annotation=annotation,
                                     time_range=types.SimpleNamespace(elapsed_us=lambda: us))
    prof = types.SimpleNamespace(events=lambda: [
        event("attn_forward_tmawr_bf16r_hs64", DeviceType.CUDA, 50.0),
        event("attn_forward_tmawr_bf16r_hs64", DeviceType.CUDA, 52.0),
        event("vectorized_elementwise_kernel<FillFunctor>", DeviceType.CUDA, 40.0),   # the flush
        event("aten::scaled_dot_product_attention", DeviceType.CPU, 9.0),
        event("window", DeviceType.CUDA, 999.0, annotation=True),
        event("cudnn_fprop", DeviceType.CUDA, 45.0)])
    got = probe.kernel_durations(prof, ("fill", "Fill"))
    assert got == {"attn_forward_tmawr_bf16r_hs64": [50.0, 52.0], "cudnn_fprop": [45.0]}


def test_without_a_gpu_it_says_so_in_one_line_and_exits_2(tmp_path):
    # a stand-in cupy that fails to import, whatever this machine has
    (tmp_path / "cupy.py").write_text("raise ImportError('no cupy here')\n")
    r = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "out.jsonl")], capture_output=True, text=True,
                       env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stdout.strip().splitlines() == ["attention_forward_alone_probe: no GPU (no cupy here)"]
    assert not (tmp_path / "out.jsonl").exists()
