"""Method B: the 1e-5 / 1% rules, protocol rule 52's window, the ulp move, and the floor's copy of the torch loop."""
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from tr2 import floor, method_b
from tr2.models import load_model


def losses(n, base=3.0):
    return {s: base - 0.001 * s for s in range(n + 1)}


def moved(d, step, rel):
    out = dict(d)
    out[step] = d[step] * (1.0 + rel)
    return out


def test_step0_within_1e5_relative():
    t = losses(200)
    assert method_b.verdict(t, moved(t, 0, 0.9e-5), 200)["passed"] is True
    v = method_b.verdict(t, moved(t, 0, 1.1e-5), 200)
    assert v["passed"] is False and v["step0"]["ok"] is False and v["window"]["ok"] is True


def test_each_step_within_one_percent():
    t = losses(200)
    assert method_b.verdict(t, moved(t, 137, 0.0099), 200)["passed"] is True
    v = method_b.verdict(t, moved(t, 137, -0.0101), 200)
    assert v["passed"] is False and v["window"]["failed_steps"] == [137] and v["window"]["worst_step"] == 137
    assert math.isclose(v["window"]["max_rel"], 0.0101, rel_tol=1e-9)
    assert "full" not in v  # the whole window judges: nothing stated beside it


def test_gpt2_medium_window_judges_steps_1_to_100_and_states_200_beside():
    t = losses(200)
    late = moved(t, 150, 0.0142)  # protocol rule 52: parted by 1.42% by step 200
    v = method_b.verdict(t, late, 200, judge_steps=100)
    assert v["passed"] is True and v["judge_last_step"] == 100 and v["window"]["last"] == 100
    assert v["full"]["passed"] is False and v["full"]["failed_steps"] == [150]
    early = moved(t, 100, 0.0142)
    v = method_b.verdict(t, early, 200, judge_steps=100)
    assert v["passed"] is False and v["full"]["passed"] is False


def test_missing_or_nonfinite_step_fails():
    t = losses(20)
    c = dict(t)
    del c[7]
    v = method_b.verdict(t, c, 20)
    assert v["passed"] is False and 7 in v["window"]["missing"]
    c = dict(t)
    c[3] = float("nan")
    assert method_b.verdict(t, c, 20)["passed"] is False


def test_relative_to_the_torch_side():
    assert method_b.rel_diff(2.0, 2.02) == pytest.approx(0.01)
    assert method_b.rel_diff(2.0, 2.0) == 0.0
    assert method_b.rel_diff(2.0, float("inf")) == math.inf


def _ulp_moves(before: np.ndarray, after: np.ndarray):
    up = np.nextafter(before, np.float32(np.inf))
    down = np.nextafter(before, np.float32(-np.inf))
    return (after == up), (after == down)


def test_random_ulp_moves_every_weight_by_exactly_one_ulp():
    torch.manual_seed(0)
    cfg = load_model("tiny", dropout=0.0)
    from tr2.torch_side.model import GPT
    model = GPT(cfg)
    before = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    assert model.transformer.wte.weight is model.lm_head.weight  # tied: one tensor, moved once
    gen = torch.Generator().manual_seed(1337)
    n = floor.perturb_ulp(model.parameters(), gen)
    assert n == sum(p.numel() for p in model.parameters())
    n_up = n_down = 0
    for name, p in model.named_parameters():
        b, a = before[name], p.detach().numpy()
        up, down = _ulp_moves(b, a)
        assert np.all(up ^ down), f"{name}: some element did not move by exactly one ulp"
        assert np.all(a != b)
        n_up += int(up.sum())
        n_down += int(down.sum())
    assert abs(n_up - n_down) < 0.02 * n  # the direction is a fair coin per element
    # the same seed moves the same way
    m2 = GPT(cfg)
    with torch.no_grad():
        for (name, p) in m2.named_parameters():
            p.copy_(torch.from_numpy(before[name]))
    floor.perturb_ulp(m2.parameters(), torch.Generator().manual_seed(1337))
    for (n1, p1), (n2, p2) in zip(model.named_parameters(), m2.named_parameters()):
        assert torch.equal(p1, p2)


def test_up_ulp_is_numpys_nextafter_towards_inf():
    x = torch.tensor([0.0, -0.0, 1.0, -1.0, 3.5e-38, 1e-45, 65504.0, -2.0 ** -20], dtype=torch.float32)
    b = x.numpy().copy()
    floor.perturb_ulp([x], how="up")
    assert np.array_equal(x.numpy(), np.nextafter(b, np.float32(np.inf)))


@pytest.mark.slow
def test_floor_copy_of_the_torch_loop_matches_the_trainer(tmp_path):
    """The floor's unperturbed loop is the torch side's loop: same losses to the bit, on the CPU."""
    from tr2.data import write_batch_order
    cfg = load_model("tiny")
    init, order, metrics = tmp_path / "init.npz", tmp_path / "order.npy", tmp_path / "t.jsonl"
    steps = 6
    write_batch_order(order, cfg.dataset, cfg.block_size, cfg.batch_size, steps, 1337)
    r = subprocess.run([sys.executable, "-m", "tr2.train", "--side", "torch", "--model", "tiny", "--device", "cpu",
                        "--steps", str(steps), "--no-tf32", "--dropout", "0", "--save-init", str(init),
                        "--batches", str(order), "--metrics", str(metrics)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    from tr2.trainlog import read_metrics
    trainer = read_metrics(metrics)["loss"]
    import io
    ours = floor.train_floor("tiny", str(init), str(order), steps, 1337, "cpu", "eager", "none", 0, out=io.StringIO())
    assert ours == [trainer[s] for s in range(steps + 1)]
    once = floor.train_floor("tiny", str(init), str(order), steps, 1337, "cpu", "eager", "once", 0, out=io.StringIO())
    # One ulp on a 0.2M-parameter model moves the float32 loss by at most a few ulp in a few steps (often not at all).
    assert max(abs(a - b) / b for a, b in zip(once, ours)) < 1e-5


def _stage_card(**method_b_keys):
    from tr2.cards import validate_card
    return validate_card({
        "card": "test", "machine": "cpu", "device": "cpu", "models": ["tiny"], "dtypes": ["float32"],
        "torch_modes": ["eager"], "half_roundings": [False],
        "series": {"rounds": 1, "steps": 40, "window": [10, 40], "timeout_s": 60, "sample_interval_s": 1.0},
        "method_a": {"seeds": [1], "steps": 40, "eval_interval": 20, "eval_iters": 2, "judge_from": 20,
                     "torch_mode": "eager"},
        "method_b": {"steps": 5, "judge_steps": {}, "seed": 1337, **method_b_keys},
        "families": {"steps": 4, "window": [2, 4], "rules": "params/families.tsv"},
    })


def test_card_without_floors_and_also_runs_all_floors_and_nothing_else():
    """Cards and results folders written before the two keys existed read as they ran."""
    card = _stage_card()
    assert card["method_b"]["floors"] == ["none", "once", "every"] and card["method_b"]["also"] == []
    assert [r["what"] for r in method_b.plan(card)] == ["init", "order", "torch", "cupy", "floor-none", "floor-once",
                                                        "floor-every"]
    card = _stage_card(floors=[], also=["torch-default", "cupy-again"])
    assert [r["what"] for r in method_b.plan(card)] == ["init", "order", "torch", "cupy", "also-cupy-again",
                                                        "also-torch-default"]


@pytest.mark.parametrize("key,value,says", [
    ("floors", ["twice"], "method_b.floors: 'twice' is not allowed; allowed: none | once | every"),
    ("floors", "once", "method_b.floors: 'once' is not allowed; allowed: a list (may be empty) of none | once | every"),
    ("also", ["torch-eager"], "method_b.also: 'torch-eager' is not allowed; allowed: cupy-again | torch-default"),
    ("also", ["cupy-again", "cupy-again"], "method_b.also: ['cupy-again', 'cupy-again'] lists a value twice"),
    ("floors", ["once"], "method_b.floors: ['once'] is not allowed; allowed: [] or a list holding none"),
])
def test_bad_floors_or_also_name_key_value_and_allowed(key, value, says):
    from tr2 import Tr2Error
    with pytest.raises(Tr2Error) as e:
        _stage_card(**{key: value})
    assert str(e.value).startswith(says)


def test_the_cards_names_are_the_runs_method_b_knows():
    from tr2.cards import ALSO_NAMES, FLOOR_NAMES
    assert tuple(method_b.ALSO) == ALSO_NAMES and method_b.FLOORS == FLOOR_NAMES


def test_also_commands_run_the_named_side_and_mode(tmp_path):
    card = _stage_card(floors=[], also=["cupy-again", "torch-reduce-overhead"])
    p = method_b._paths(tmp_path, "tiny")
    cupy = method_b.command(card, {"model": "tiny", "what": "also-cupy-again"}, p)
    torch_ro = method_b.command(card, {"model": "tiny", "what": "also-torch-reduce-overhead"}, p)
    assert cupy[cupy.index("--side") + 1] == "cupy" and "--mode" not in cupy
    assert torch_ro[torch_ro.index("--side") + 1] == "torch" and torch_ro[torch_ro.index("--mode") + 1] == "reduce-overhead"
    for cmd, name in ((cupy, "cupy-again"), (torch_ro, "torch-reduce-overhead")):
        for flag in ("--no-tf32", "--init", "--batches"):
            assert flag in cmd
        assert cmd[cmd.index("--dropout") + 1] == "0"
        assert cmd[cmd.index("--metrics") + 1] == str(p[f"also-{name}"])


@pytest.mark.slow
def test_stage_with_cupy_again_and_one_floor_on_the_cpu(tmp_path, one_torch_thread):
    """The stage end to end on the tiny model: the NumPy side repeats itself to the bit (cupy-again 0),
    the floor's unperturbed copy equals the trainer's torch run, and only the named runs ran."""
    card = _stage_card(floors=["none"], also=["cupy-again"])
    d = tmp_path / "res"
    method_b.run(card, d)
    s = method_b.summarize(d)
    (m,) = s["models"]
    assert set(m["runs"]) == {"init", "order", "torch", "cupy", "floor-none", "also-cupy-again"}
    assert all(v == "ok" for v in m["runs"].values())
    assert m["also"]["cupy-again"]["all_steps"]["max_rel"] == 0.0
    assert m["floor_copy_vs_trainer"]["max_rel"] == 0.0
    assert m["verdict"]["passed"] is True
    import pandas as pd
    rows = pd.read_csv(d / "method_b.csv")
    assert list(rows.columns[-2:]) == ["cupy-again", "rel_cupy-again"] and len(rows) == 6
    assert (rows["cupy-again"] == rows["cupy"]).all()
    assert (d / "method_b.png").is_file()


# ---------------------------------------------------------------------------------------------------------
# issue 11's window: W from the floors


def floor_rel(n, rel_at):
    """A floor run's relative differences over steps 0..n: rel_at(step)."""
    return {s: rel_at(s) for s in range(n + 1)}


def test_w_is_the_last_step_every_floor_stays_within_half_a_percent():
    fw = method_b.floor_window({"rerun": floor_rel(200, lambda s: 0.0),
                                "once": floor_rel(200, lambda s: 1e-4 * s),        # 0.5% exactly at 50: within
                                "every": floor_rel(200, lambda s: 2e-3 if s < 140 else 0.02)}, 200)
    assert fw["W"] == 50 and fw["limited_by"] == ["once"] and not fw["too_chaotic"]
    assert fw["floors"]["once"]["first_over"] == 51 and fw["floors"]["every"]["first_over"] == 140
    assert fw["floors"]["rerun"]["first_over"] is None and fw["floors"]["once"]["max_rel_to_W"] == pytest.approx(5e-3)
    # one step more over the band, and W drops below 50: flagged, and said in the sentence
    fw = method_b.floor_window({"once": floor_rel(200, lambda s: 1e-4 * (s + 1))}, 200)
    assert fw["W"] == 49 and fw["too_chaotic"]
    said = method_b.window_said(fw)
    assert said.startswith("W = 49 of 200, set by once; floors (max to W, first step over 0.5%): once 0.005 (50); ")
    assert said.endswith("W below 50: the model is too chaotic on this card for method B to judge past step 49")


def test_w_edges_missing_steps_step_zero_no_floors_and_short_runs():
    f = floor_rel(100, lambda s: 0.0)
    del f[70]
    assert method_b.floor_window({"nanogpt": f}, 100)["W"] == 69                 # a missing step ends the stretch
    assert method_b.floor_window({"x": floor_rel(100, lambda s: math.nan if s == 80 else 0.0)}, 100)["W"] == 79
    assert method_b.floor_window({"x": floor_rel(100, lambda s: 0.01)}, 100)["W"] == 0  # over at step 0: step 0 alone
    fw = method_b.floor_window({}, 120)
    assert fw["W"] == 120 and fw["no_floors"] and "no floor run" in method_b.window_said(fw)
    fw = method_b.floor_window({"x": floor_rel(20, lambda s: 1e-7)}, 20)                # the CPU: W is the whole run
    assert fw["W"] == 20 and not fw["too_chaotic"] and fw["limited_by"] == []


def test_verdict_judges_steps_1_to_w_and_states_the_rest_beside():
    t = losses(200)
    c = moved(moved(t, 150, 0.03), 50, 0.009)   # 0.9% at 50 (inside W), 3% at 150 (after W)
    v = method_b.verdict(t, c, 200, judge_steps=100)
    assert v["passed"] is True and v["full"]["passed"] is False and v["judge_last_step"] == 100
    assert method_b.verdict(moved(t, 0, 0), moved(c, 80, 0.011), 200, judge_steps=100)["passed"] is False


def test_card_window_rule_key():
    from tr2 import Tr2Error
    assert _stage_card()["method_b"]["window"] == "judge_steps"  # cards before the rule read as they ran
    assert _stage_card(window="floors")["method_b"]["window"] == "floors"
    for kw, says in (({"window": "fixed"}, "method_b.window: 'fixed' is not allowed; allowed: floors | judge_steps"),
                     ({"window": "floors", "floors": []},
                      "method_b.floors: [] is not allowed; allowed: at least [none] when method_b.window is floors")):
        with pytest.raises(Tr2Error) as e:
            _stage_card(**kw)
        assert str(e.value).startswith(says)


def test_nanogpt_runs_in_method_b_from_the_same_start_where_the_card_lists_it(tmp_path):
    card = _stage_card(floors=["none"])
    card["torch_loops"] = ["torch", "nanogpt"]
    assert [r["what"] for r in method_b.plan(card)][2:] == ["torch", "cupy", "nanogpt", "floor-none"]
    p = method_b._paths(tmp_path, "tiny")
    cmd = method_b.command(card, {"model": "tiny", "what": "nanogpt"}, p)
    assert cmd[cmd.index("--side") + 1] == "nanogpt" and cmd[cmd.index("--nanogpt") + 1] == "../shared/nanoGPT"
    for flag, value in (("--init", str(p["init"])), ("--batches", str(p["order"])), ("--dropout", "0"),
                        ("--metrics", str(p["nanogpt"])), ("--mode", "eager")):
        assert cmd[cmd.index(flag) + 1] == value
    assert "--no-tf32" in cmd


@pytest.mark.slow
def test_stage_with_nanogpt_and_the_floor_window_on_the_cpu(tmp_path, one_torch_thread):
    """End to end on the tiny model: nanoGPT's train.py equals our loop to 1e-6, every floor stays in the band,
    so W is the whole run (as on every CPU card) and the verdict judges all steps."""
    from tr2.nanogpt_side import checkout_path
    from tr2 import Tr2Error
    try:
        checkout_path(None)
    except Tr2Error:
        pytest.skip("no nanoGPT checkout at ../shared/nanoGPT")
    card = _stage_card(floors=["none", "once"], window="floors")
    card["torch_loops"] = ["torch", "nanogpt"]
    d = tmp_path / "res"
    method_b.run(card, d)
    (m,) = method_b.summarize(d)["models"]
    assert all(v == "ok" for v in m["runs"].values()) and "nanogpt" in m["runs"]
    assert m["nanogpt"]["all_steps"]["max_rel"] <= 1e-6 and m["nanogpt"]["step0"]["max_rel"] <= 1e-6
    assert m["window"]["W"] == 5 == m["judge_last_step"] and set(m["window"]["floors"]) == {"rerun", "once", "nanogpt"}
    assert m["verdict"]["passed"] is True and m["verdict"]["window_rule"]["W"] == 5
    assert m["verdict"]["reason"].startswith("W = 5 of 5; floors (max to W, first step over 0.5%): rerun 0 (never), ")
    assert "; step 0: max " in m["verdict"]["reason"]


# ---------------------------------------------------------------------------------------------------------
# resuming in another call: the device call's results come back without their .npz (the shared start)


def _drop_last_record(d):
    lines = (d / "runs.jsonl").read_text().splitlines()
    (d / "runs.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    return json.loads(lines[-1])


@pytest.mark.slow
def test_a_resumed_stage_rebuilds_a_missing_start_and_checks_it_against_its_digest(tmp_path, one_torch_thread):
    from tr2 import Tr2Error
    from tr2.trainlog import read_metrics
    card = _stage_card(floors=["none"])
    d = tmp_path / "res"
    method_b.run(card, d)
    p = method_b._paths(d, "tiny")
    first = {r["key"]: r for r in map(json.loads, (d / "runs.jsonl").read_text().splitlines())}
    assert first["tiny/init"]["init_sha256"] == method_b.weights_digest(p["init"])
    assert first["tiny/order"]["order_sha256"] == method_b.file_digest(p["order"])
    before = read_metrics(p["floor-none"])["loss"]

    # as a later call sees it: the last piece not run yet, neither the start nor the order there
    assert _drop_last_record(d)["key"] == "tiny/floor-none"
    p["init"].unlink()
    p["order"].unlink()
    method_b.run(card, d)
    again = json.loads((d / "runs.jsonl").read_text().splitlines()[-1])
    assert again["key"] == "tiny/floor-none" and again["status"] == "ok" and again["rebuilt"] == ["init", "order"]
    assert read_metrics(p["floor-none"])["loss"] == before
    assert method_b.weights_digest(p["init"]) == first["tiny/init"]["init_sha256"]

    # a rebuilt start that differs from the recorded one is refused, and the piece fails with why
    _drop_last_record(d)
    p["init"].unlink()
    lines = (d / "runs.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    for r in recs:
        if r["key"] == "tiny/init":
            r["init_sha256"] = "0" * 64
    (d / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(Tr2Error, match="tiny/floor-none failed"):
        method_b.run(card, d)
    failed = json.loads((d / "runs.jsonl").read_text().splitlines()[-1])
    assert failed["status"] == "failed" and "is not the recorded 0000000000000000" in failed["reason"]
    assert not p["init"].exists()

    # a folder from before the digests: nothing to check a rebuilt start against, so it is not rebuilt
    for r in recs:
        r.pop("init_sha256", None)
    (d / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(Tr2Error):
        method_b.run(card, d)
    failed = json.loads((d / "runs.jsonl").read_text().splitlines()[-1])
    assert "holds no init_sha256" in failed["reason"] and not p["init"].exists()


def test_weights_digest_reads_the_arrays_not_the_zip(tmp_path):
    a = {"b": np.arange(6, dtype=np.float32).reshape(2, 3), "a": np.ones(4, np.float32)}
    np.savez(tmp_path / "one.npz", **a)
    np.savez_compressed(tmp_path / "two.npz", **dict(reversed(list(a.items()))))
    assert method_b.weights_digest(tmp_path / "one.npz") == method_b.weights_digest(tmp_path / "two.npz")
    a["a"][2] = np.nextafter(np.float32(1), np.float32(2))
    np.savez(tmp_path / "three.npz", **a)
    assert method_b.weights_digest(tmp_path / "three.npz") != method_b.weights_digest(tmp_path / "one.npz")
