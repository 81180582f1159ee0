"""The card's clock and power while each side's step time was measured: the series' samples inside a timed run's
window (tr2.series.window_gpu), each record's `gpu_window`, read again from the logs for records made before it
(tr2.explore.timed_clocks), and the report's table of them (the H200 edition's GPT-2 steps draw the card's 700 W
limit, and the cupy side ran at a lower clock than PyTorch's: results/h200-perf-20261203g)."""
import json

import pytest
import yaml

from tr2 import explore
from tr2.clock import analyze
from tr2.series import window_gpu

WINDOW = [10, 40]


def _sample(t, mhz, watts):
    return {"t": t, "sm_mhz": mhz, "mem_mhz": 3201, "temp_c": 40, "power_w": watts, "mem_used_bytes": 1 << 30,
            "util_pct": 99}


def test_the_window_stamps_come_from_the_iter_lines_of_its_ends():
    lines = [(5.0, "iter 0: loss 4.0, time 10.00ms"), (6.0, "iter 10: loss 3.0, time 10.00ms"),
             (6.3, "iter 40: loss 2.0, time 10.00ms")]
    assert analyze(lines, (10, 40))["window_t"] == [6.0, 6.3]
    assert analyze(lines, (10, 50))["window_t"] is None   # no iter line for step 50


def test_only_the_samples_inside_the_window_count():
    samples = [_sample(1.0, 1980, 120.0), _sample(2.0, 1620, 690.0), _sample(3.0, 1605, 695.0),
               _sample(4.0, 1980, 130.0)]
    got = window_gpu(samples, [1.5, 3.0])
    assert got["samples"] == 2 and got["sm_mhz"]["median"] == pytest.approx(1612.5)
    assert got["power_w"]["max"] == pytest.approx(695.0)
    assert window_gpu(samples, None) is None and window_gpu(samples, [10.0, 11.0]) is None
    assert window_gpu([{"sm_mhz": 1}], [0.0, 5.0]) is None   # a sample without its time is not placed in the window


def test_the_energy_counter_gives_the_windows_mean_power():
    """tr2.series.counter_watts: the counter's difference between the window's first and last samples over their
    time; None where fewer than two samples read it or it did not move forward (a driver without the counter gives
    None in every sample)."""
    from tr2.series import counter_watts
    samples = [_sample(1.0, 1980, 120.0) | {"energy_mj": 999_880_000},
               _sample(2.0, 1620, 690.0) | {"energy_mj": 1_000_000_000},
               _sample(3.5, 1605, 695.0) | {"energy_mj": 1_001_035_000},   # 1035 J in 1.5 s
               _sample(4.0, 1980, 130.0) | {"energy_mj": None}]
    assert counter_watts(samples[1:3]) == pytest.approx(690.0)
    assert window_gpu(samples, [1.5, 4.0])["counter_w"] == pytest.approx(690.0)   # the sample without it left out
    assert counter_watts(samples[:1]) is None and counter_watts([]) is None
    assert counter_watts([samples[1], samples[1]]) is None                   # no time between them
    assert counter_watts([samples[2], samples[1] | {"t": 4.5}]) is None      # the counter went backwards
    assert window_gpu([_sample(2.0, 1620, 690.0), _sample(3.0, 1605, 695.0)], [1.0, 4.0])["counter_w"] is None


def _series(root, with_record_window: bool, d=None, watts=None, span=4.0):
    """A series folder (d: one that exists, else a new one) of two timed runs (cupy, torch) and a discarded one, with
    their logs and samples as the stage writes them; watts (side -> W): the samples read an energy counter rising at
    that rate; span: the timed window's seconds."""
    if d is None:
        d = root / "series-20261203-120000-demo"
        (d / "logs").mkdir(parents=True)
        (d / "card.yaml").write_text(yaml.safe_dump({"card": "demo", "device": "cuda", "models": ["tiny"],
                                                     "dtypes": ["bfloat16"], "series": {"window": WINDOW,
                                                                                        "sample_interval_s": 1.0}}))
    recs = []
    for r, side, mhz in ((0, "cupy", 1980), (1, "cupy", 1620), (1, "torch", 1800)):
        name = f"r{r}-tiny_bfloat16_{side}"
        t0 = 100.0 * (len(recs) + 1)
        (d / "logs" / f"{name}.log").write_text(
            f"{t0:.6f}\titer 0: loss 4.0, time 10.00ms\n{t0 + 1:.6f}\titer 10: loss 3.0, time 10.00ms\n"
            f"{t0 + 1 + span:.6f}\titer 40: loss 2.0, time 10.00ms\n")
        # three samples inside the window, the first and last `span` - 1 s apart (the energy reading's stretch)
        samples = [_sample(t0 + 0.5, 1980, 120.0)] + [_sample(t0 + 1.5 + i * (span - 1) / 2, mhz, 690.0 + i)
                                                      for i in range(3)]
        if watts:
            samples = [x | {"energy_mj": int(1e9 + watts[side] * 1000 * (x["t"] - t0))} for x in samples]
        (d / "logs" / f"{name}.gpu.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
        rec = {"round": r, "config": f"tiny/bfloat16/{side}", "model": "tiny", "dtype": "bfloat16", "side": side,
               "build": "cupy-hr" if side == "cupy" else "torch-reduce-overhead",
               "mode": None if side == "cupy" else "reduce-overhead", "status": "ok", "valid": r > 0,
               "step_ms": 100.0, "log": f"logs/{name}.log"}
        if with_record_window:
            rec["gpu_window"] = window_gpu(samples, [t0 + 1, t0 + 1 + span])
        recs.append(rec)
    (d / "runs.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    return d


@pytest.mark.parametrize("with_record_window", [True, False], ids=["recorded", "read-from-logs"])
def test_timed_clocks_per_configuration(tmp_path, with_record_window):
    d = _series(tmp_path, with_record_window)
    t = explore.timed_clocks(d).set_index("side")
    assert sorted(t.index) == ["cupy", "torch"]   # round 0 (discarded) left out
    assert t.loc["cupy", "sm_mhz"] == 1620 and t.loc["torch", "sm_mhz"] == 1800
    assert t.loc["cupy", "samples"] == 3 and t.loc["cupy", "runs"] == 1   # the sample before iter 10 is outside
    assert t.loc["cupy", "power_w"] == pytest.approx(691.0)


@pytest.mark.parametrize("with_record_window", [True, False], ids=["recorded", "read-from-logs"])
def test_timed_clocks_give_the_joules_a_step_where_the_counter_was_read(tmp_path, with_record_window):
    d = _series(tmp_path, with_record_window, watts={"cupy": 690.0, "torch": 640.0})
    t = explore.timed_clocks(d).set_index("side")
    assert t.loc["cupy", "joules_step"] == pytest.approx(69.0)    # 690 W x 100 ms
    assert t.loc["torch", "joules_step"] == pytest.approx(64.0)
    # the readings span 3 s (the samples': span - 1): the counter's 0.1 s step over them
    assert t.loc["cupy", "joules_bound"] == pytest.approx(0.1 / 3.0)
    plain = explore.timed_clocks(_series(tmp_path / "plain", with_record_window)).set_index("side")
    assert plain["joules_step"].isna().all() and plain["joules_bound"].isna().all()
    # a window whose readings span 1.5 s (under tr2.series.ENERGY_MIN_SPAN_S): its joules not given
    short = explore.timed_clocks(_series(tmp_path / "short", with_record_window, watts={"cupy": 690.0, "torch": 640.0},
                                         span=2.5)).set_index("side")
    assert short["joules_step"].isna().all() and (short["power_w"] == [691.0, 691.0]).all()
    assert short["joules_bound"].isna().all()   # nothing counted, nothing bounded


def test_the_energy_readings_span_and_the_rule_on_it():
    from tr2.series import ENERGY_MIN_SPAN_S, counter_span, energy_counts
    samples = [{"t": 1.0, "energy_mj": 5}, {"t": 2.0}, {"t": 4.5, "energy_mj": 9}, {"t": 9.0, "energy_mj": None}]
    assert counter_span(samples) == 3.5 and counter_span(samples[:2]) is None and counter_span([]) is None
    assert window_gpu(samples, [0.0, 10.0])["counter_s"] == 3.5
    assert ENERGY_MIN_SPAN_S == 3.0
    assert energy_counts(3.0) and energy_counts(12) and not energy_counts(2.99)
    assert not energy_counts(None) and not energy_counts("4")


def test_a_counted_windows_bound_is_the_counters_step_over_its_span():
    """The counter changes every ENERGY_COUNTER_INTERVAL_S (0.1 s on the H200, results/h200-perf-20261204e call 2):
    each end's reading up to that old, so a window of L s is off by up to 0.1 / L."""
    from tr2.series import ENERGY_COUNTER_INTERVAL_S, ENERGY_MIN_SPAN_S, energy_bound
    assert ENERGY_COUNTER_INTERVAL_S == 0.1
    assert energy_bound(4.0) == pytest.approx(0.025) and energy_bound(ENERGY_MIN_SPAN_S) == pytest.approx(0.1 / 3)
    assert energy_bound(12.5) < energy_bound(5.0) < energy_bound(3.0)
    for unknown in (None, 0, 0.0, -1.0, "4", True, float("nan")):
        assert energy_bound(unknown) is None, unknown


@pytest.mark.parametrize("watts", [None, {"cupy": 690.0, "torch": 640.0}], ids=["no-counter", "counter"])
def test_the_front_page_shows_the_energy_a_step_only_where_it_was_read(tmp_path, watts):
    bs4 = pytest.importorskip("bs4")
    import tr2.report as rp
    from test_report import CARD, make_results
    card = dict(CARD, card="gpu", machine="nvidia-h200", device="cuda",
                series={"rounds": 1, "window": WINDOW, "sample_interval_s": 1.0})
    make_results(tmp_path / "results", card=card)
    dirs = rp.choose_dirs("gpu", root=tmp_path / "results")
    _series(tmp_path, False, d=next(d for d in dirs if d.name.startswith("series-")), watts=watts)
    html = rp.front_page_html(rp.build_table("gpu", dirs, tmp_path))
    table = bs4.BeautifulSoup(html, "html.parser").find(id="timed-clocks")
    cells = [td.get_text() for td in table.find_all("td", class_="joules")]
    assert cells == ([] if watts is None else ["69.000 ± 3.3%", "64.000 ± 3.3%"])
    assert ("energy a step, J" in table.get_text()) == (watts is not None)
    assert ("span at least 3.0 s of a window" in " ".join(html.split())) == (watts is not None)
    assert ("changes every 0.1 s" in " ".join(html.split())) == (watts is not None)


def test_the_front_page_shows_the_clocks_of_the_timed_windows(tmp_path):
    bs4 = pytest.importorskip("bs4")
    import tr2.report as rp
    from test_report import CARD, make_results
    card = dict(CARD, card="gpu", machine="nvidia-h200", device="cuda",
                series={"rounds": 1, "window": WINDOW, "sample_interval_s": 1.0})
    make_results(tmp_path / "results", card=card)
    dirs = rp.choose_dirs("gpu", root=tmp_path / "results")
    _series(tmp_path, False, d=next(d for d in dirs if d.name.startswith("series-")))
    data = rp.build_table("gpu", dirs, tmp_path)
    assert [r["side"] for r in data["machine"]["timed"]["rows"]] == ["cupy", "torch"]
    table = bs4.BeautifulSoup(rp.front_page_html(data), "html.parser").find(id="timed-clocks")
    sm = {tr["data-side"]: tr.find("td", class_="sm")["data-value"] for tr in table.find_all("tr", attrs={"data-side": True})}
    assert sm == {"cupy": "1620.0", "torch": "1800.0"}
    assert "between the iter lines of steps 10 and 40" in table.find_previous("p").get_text()


def test_no_table_without_samples(tmp_path):
    """The CPU card samples nothing: no table, and the machine section says no GPU samples as before."""
    from tr2.report.verdicts import _timed_clocks
    d = tmp_path / "series-20261203-120000-cpu"
    d.mkdir()
    (d / "runs.jsonl").write_text(json.dumps({"round": 1, "config": "tiny/float32/cupy", "valid": True,
                                              "gpu": None, "gpu_window": None}) + "\n")
    assert _timed_clocks(d) is None


def test_the_energy_counter_is_read_at_the_windows_own_iter_lines():
    """series.window_marker marks the first iter line of each window end (GpuSampler.mark: a sample filed at the
    line's stamp); the window's mean power then spans the timed window itself (counter_span = its length,
    counter_marked), where periodic samples span only the stretch between two of them inside it."""
    from tr2 import series

    class Sampler:
        def __init__(self):
            self.samples = []

        def mark(self, t, **tags):
            self.samples.append({"t": t, "energy_mj": int(t * 500_000), "read_lag_s": 0.002, **tags})

    s = Sampler()
    on_line = series.window_marker(s, (100, 400))
    for t, line in [(1.0, "iter 90: loss 2.0, time 4.0ms"), (1.2, "iter 100: loss 2.0, time 4.0ms"),
                    (1.25, "step 100 eval"), (1.3, "iter 100: loss 2.0, time 4.0ms"),   # a step's second line: no mark
                    (2.4, "iter 400: loss 1.0, time 4.0ms"), (2.5, "iter 410: loss 1.0, time 4.0ms")]:
        on_line(t, line)
    assert [(x["t"], x["mark"]) for x in s.samples] == [(1.2, 100), (2.4, 400)]
    periodic = [{"t": 1.5, "energy_mj": 750_000}, {"t": 2.0, "energy_mj": 1_000_000}]
    inside = series.window_gpu(periodic + s.samples, [1.2, 2.4])
    assert inside["counter_s"] == pytest.approx(1.2) and inside["counter_w"] == pytest.approx(500.0)
    assert inside["counter_marked"] is True and inside["mark_lag_s_max"] == 0.002
    alone = series.window_gpu(periodic, [1.2, 2.4])   # without the marks: half a second of the window
    assert alone["counter_s"] == pytest.approx(0.5) and alone["counter_marked"] is False and alone["mark_lag_s_max"] is None
