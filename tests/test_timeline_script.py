"""scripts/timeline.py (the launch-gap dev tool) on a hand-made trace: its gaps are the ones put there."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("timeline", Path(__file__).parents[1] / "scripts" / "timeline.py")
timeline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(timeline)


def _ev(ts, dur, name, cat="kernel"):
    return {"ph": "X", "cat": cat, "ts": ts, "dur": dur, "name": name}


def test_gaps_counts_idle_once_and_by_neighbours():
    trace = {"traceEvents": [
        _ev(0, 10, "layernorm_forward"),
        _ev(13, 20, "nvjet_sm90_tst_192x128"),    # gap 3 after ours
        _ev(20, 5, "overlapping_kernel"),          # inside the product: no gap, no extra busy time
        _ev(33, 2, "Memset (Device)", "gpu_memset"),  # touching: no gap
        _ev(135, 5, "gelu_forward"),               # gap 100 after the memset
        {"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 500, "name": "aten::mm"},  # host events are ignored
    ]}
    r = timeline.gaps(timeline.device_events(trace), steps=1)
    assert r["span_us_per_step"] == 140.0
    assert r["idle_us_per_step"] == 103.0
    assert r["busy_us_per_step"] == 37.0
    assert r["idle_by_pair_us"] == {"memset->ours": [100.0, 1.0], "ours->cublas": [3.0, 1.0]}
    assert r["idle_by_gap_us"]["<=4"] == [3.0, 1.0] and r["idle_by_gap_us"]["<=100"] == [100.0, 1.0]
    assert r["largest"][0] == [100.0, "Memset (Device)", "gelu_forward"]


def test_kinds():
    assert timeline.kind("attn_forward_bf16r_hs64", "kernel") == "ours"
    assert timeline.kind("void at::native::vectorized_elementwise_kernel<4>", "kernel") == "torch"
    assert timeline.kind("triton_poi_fused_add_0", "kernel") == "torch"
    assert timeline.kind("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy") == "copy"
