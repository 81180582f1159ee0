"""tr2.explore_plots' method A and method B figures: what protocol §7 publishes is on them. Method A: every seed's
curve of a configuration on one plot (not only the medians), the judged evaluations zoomed, rule 41's distance
against the larger range; method B: both sides' loss curves on one axis, the relative difference below on the
same steps. Small made-up tables, the committed CPU folders, and the stages' summaries drawing them."""
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from tr2 import RESULTS_DIR
import tr2.explore as ex
import tr2.explore_plots as plots
from tr2.summary import pyplot

CPU_A = RESULTS_DIR / "method_a-20261129-092650-cpu"
CPU_B = RESULTS_DIR / "method_b-20261129-092337-cpu"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    pyplot().close("all")


def _gids(ax, prefix=""):
    return sorted(g for line in ax.get_lines() if (g := line.get_gid()) and g.startswith(prefix))


def _curves_a(over=0.0):
    """method_a.csv as tr2.explore.curves_a reads it: two configurations, three seeds a side, steps 0..100 by 20;
    the cupy side of bfloat16 `over` above the torch side from step 60 on."""
    rows = []
    for dtype in ("float32", "bfloat16"):
        for side in ("torch", "cupy"):
            for i, seed in enumerate((1337, 1338, 1339)):
                for step in range(0, 101, 20):
                    val = 4.0 - 0.02 * step + 0.01 * i
                    if side == "cupy" and dtype == "bfloat16" and step >= 60:
                        val += over
                    rows.append({"folder": "method_a-20261201-000000-test", "card": "test", "commit": "abc",
                                 "model": "tiny", "dtype": dtype, "side": side, "seed": seed, "step": step,
                                 "train": val, "val": val})
    return pd.DataFrame(rows)


def test_method_a_draws_every_seeds_curve_of_each_configuration():
    fig = plots.method_a(_curves_a(), judge_from=40)
    rows = np.array(fig.axes).reshape(-1, 3)
    assert len(rows) == 2   # one row per configuration
    seeds = sorted(f"{side} seed {s}" for side in ("torch", "cupy") for s in (1337, 1338, 1339))
    for whole, zoom, _ in rows:
        # every seed a line of its own, in the whole run and in the judged steps, beside each side's median
        assert sorted(_gids(whole, "torch seed") + _gids(whole, "cupy seed")) == seeds
        assert sorted(_gids(zoom, "torch seed") + _gids(zoom, "cupy seed")) == seeds
        assert _gids(whole, "torch median") == ["torch median"] and _gids(whole, "cupy median") == ["cupy median"]
        for line in zoom.get_lines():
            assert min(line.get_xdata()) >= 40   # the zoom holds the judged evaluations alone
        assert whole.get_yscale() == "log"
        seed_line = next(ln for ln in whole.get_lines() if ln.get_gid() == "torch seed 1338")
        assert list(seed_line.get_ydata()) == pytest.approx([4.01 - 0.02 * s for s in range(0, 101, 20)])
        assert {ln.get_color() for ln in whole.get_lines() if "cupy" in (ln.get_gid() or "")} == {plots.SIDE_COLORS["cupy"]}


def test_method_a_marks_the_evaluations_over_the_larger_range():
    """Rule 41's panel: |median difference| against the larger range; a cross where it is over."""
    fig = plots.method_a(_curves_a(over=0.5), judge_from=40)
    rows = np.array(fig.axes).reshape(-1, 3)
    crosses = [ln for ln in rows[1][2].get_lines() if ln.get_marker() == "x"]
    assert len(crosses) == 1   # bfloat16 alone, at steps 60, 80, 100
    assert not [ln for ln in rows[0][2].get_lines() if ln.get_marker() == "x"]
    assert list(crosses[0].get_xdata()) == [60, 80, 100]
    dots = [ln for ln in rows[0][2].get_lines() if ln.get_marker() == "o"]   # float32: within at 40..100
    assert list(dots[0].get_xdata()) == [40, 60, 80, 100] and list(dots[0].get_ydata()) == pytest.approx([0.0] * 4)


def test_method_a_with_one_seed_a_side_judges_nothing():
    """Rule 42: a side of one seed has no range, so its curves are read, not judged: no bar, no cross."""
    curves = _curves_a(over=0.5)
    fig = plots.method_a(curves[curves["seed"] == 1337], judge_from=40)
    for whole, _, rule in np.array(fig.axes).reshape(-1, 3):
        assert _gids(whole) == ["cupy seed 1337", "torch seed 1337"]   # the seed is the curve: no median drawn
        assert not rule.patches and not [ln for ln in rule.get_lines() if ln.get_marker() == "x"]
        assert "nothing judged" in rule.get_title()


def test_method_a_reads_the_judged_step_from_the_verdicts():
    curves = _curves_a()
    verdicts = pd.DataFrame([{"folder": curves["folder"][0], "model": "tiny", "dtype": t, "judge_from": 60,
                              "passed": True} for t in ("float32", "bfloat16")])
    fig = plots.method_a(curves, verdicts=verdicts)
    for whole, zoom, rule in np.array(fig.axes).reshape(-1, 3):
        assert min(min(ln.get_xdata()) for ln in zoom.get_lines()) == 60
        assert "verdict: passed" in rule.get_title()


def test_method_a_of_the_committed_cpu_folder_has_all_ten_curves():
    """Protocol §7 A: "All ten curves are published on one plot" (five seeds a side)."""
    judge_from = ex.verdicts_a(CPU_A)["judge_from"].iloc[0]
    fig = plots.method_a(ex.curves_a(CPU_A), judge_from, ex.verdicts_a(CPU_A))
    whole, zoom, rule = fig.axes[:3]
    assert len(_gids(whole, "torch seed")) == len(_gids(whole, "cupy seed")) == 5
    assert len(_gids(zoom, "torch seed")) == len(_gids(zoom, "cupy seed")) == 5
    assert "verdict:" in rule.get_title()


def test_method_b_draws_both_loss_curves_above_their_difference():
    curves = ex.curves_b(CPU_B)
    fig = plots.method_b(curves, ex.verdicts_b(CPU_B), [("1%", 1e-2)])
    top, bottom = fig.axes[:2]
    # both sides' loss on one axis, each the run's own numbers
    assert {"loss torch", "loss cupy"} <= set(_gids(top))
    for run in ("torch", "cupy"):
        line = next(ln for ln in top.get_lines() if ln.get_gid() == f"loss {run}")
        want = curves[curves["run"] == run].sort_values("step")
        assert list(line.get_xdata()) == list(want["step"]) and list(line.get_ydata()) == pytest.approx(list(want["loss"]))
    # the floors the folder holds, their losses too; the differences below, on the same steps
    assert {f"loss {f}" for f in curves.loc[curves["floor"], "run"].unique()} <= set(_gids(top))
    assert "rel cupy" in _gids(bottom) and "rel torch" not in _gids(bottom)
    assert bottom.get_shared_x_axes().joined(top, bottom)
    assert bottom.get_yscale() == "log" and top.get_yscale() == "log"


def test_method_b_shades_the_judged_steps_and_marks_J_short_of_the_end():
    steps = range(0, 11)
    rows = [{"folder": "method_b-20261201-000000-test", "card": "test", "commit": "abc", "model": "tiny", "run": run,
             "step": s, "loss": 4.0 - 0.1 * s + d, "rel": float("nan") if run == "torch" else d / (4.0 - 0.1 * s),
             "floor": run.startswith("floor_")}
            for run, d in (("torch", 0.0), ("cupy", 1e-4), ("floor_none", 0.0)) for s in steps]
    verdicts = pd.DataFrame([{"folder": rows[0]["folder"], "model": "tiny", "judged_through": 6, "W": 6}])
    fig = plots.method_b(pd.DataFrame(rows), verdicts)
    top, bottom = fig.axes[:2]
    for ax in (top, bottom):
        assert [ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_linestyle() == "-."] == [6]
        spans = [p for p in ax.patches]
        assert len(spans) == 1 and spans[0].get_x() == 0 and spans[0].get_width() == pytest.approx(6)
    assert any("judged: steps 0..6" in t.get_text() for t in top.get_legend().get_texts())
    assert set(_gids(top)) == {"loss torch", "loss cupy", "loss floor_none"}


@pytest.mark.parametrize("stage, folder", [("method_a", CPU_A), ("method_b", CPU_B)])
def test_the_stage_saves_the_new_figure(stage, folder, tmp_path, monkeypatch):
    """The stage's summary draws its png with the new figure (the committed CPU folder summarized again in a copy)."""
    import importlib
    module = importlib.import_module(f"tr2.{stage}")
    d = tmp_path / folder.name
    shutil.copytree(folder, d, ignore=shutil.ignore_patterns(f"{stage}.png", f"{stage}.ipynb"))
    drawn = []
    real = getattr(plots, stage)
    monkeypatch.setattr(module.plots, stage, lambda *a, **k: drawn.append(a) or real(*a, **k))
    s = module.summarize(d)
    assert len(drawn) == 1 and "plot_error" not in s and (d / f"{stage}.png").stat().st_size > 10_000
    assert "plot_error" not in json.loads((d / "summary.json").read_text())
