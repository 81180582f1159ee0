"""Cards: the shipped ones are valid; a bad one stops with one line naming the key, value and what is allowed."""
import copy
import subprocess
import sys

import pytest
import yaml

from tr2 import REPO_ROOT, Tr2Error
from tr2 import runner
from tr2.cards import CARD_KEYS, card_from_notebook, card_path, load_card, validate_card

CARDS = REPO_ROOT / "params" / "cards"


@pytest.fixture
def card():
    return load_card(CARDS / "smoke.yaml")


def err(card_dict) -> str:
    with pytest.raises(Tr2Error) as e:
        validate_card(card_dict)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("name", ["cpu", "h200", "smoke", "h200-quick"])
def test_shipped_cards_are_valid(name):
    c = load_card(CARDS / f"{name}.yaml")
    assert c["card"] == name and tuple(c) == CARD_KEYS


def test_h200_card_is_the_protocols():
    c = load_card(CARDS / "h200.yaml")
    assert c["device"] == "cuda" and c["models"] == ["nanogpt", "gpt2-small", "gpt2-medium"]
    assert c["dtypes"] == ["float32", "bfloat16", "float16"]
    assert c["torch_modes"] == ["eager", "default", "reduce-overhead", "max-autotune"]
    assert c["half_roundings"] == [False, True]
    assert c["series"]["rounds"] == 5 and c["series"]["steps"] == 400 and c["series"]["window"] == [100, 400]
    assert c["method_a"]["seeds"] == [1337, 1338, 1339, 1340, 1341] and c["method_a"]["steps"] is None
    assert c["method_a"]["judge_from"] == 1000
    assert c["method_b"]["steps"] == 200 and c["method_b"]["judge_steps"] == {}
    assert c["method_b"]["window"] == "floors"  # issue 11: W from the floors replaces gpt2-medium's fixed 100
    assert c["torch_loops"] == ["torch", "nanogpt"]
    assert c["cuda_graph"] is True   # the compared cupy build times its whole-step graph


def test_cuda_graph_is_a_bool_for_a_gpu_card_and_false_when_left_out(card):
    assert card["cuda_graph"] is False        # smoke.yaml leaves it out
    c = copy.deepcopy(card)
    c["cuda_graph"] = "yes"
    assert err(c) == "cuda_graph: 'yes' is not allowed; allowed: true | false"
    c["cuda_graph"] = True                    # smoke is a cpu card
    assert err(c).startswith("cuda_graph: True is not allowed; allowed: false on a cpu card")
    c["device"] = "cuda"
    assert validate_card(c)["cuda_graph"] is True


def test_unknown_key(card):
    card["colour"] = "blue"
    assert err(card).startswith("colour: unknown key; allowed keys: card, machine, device")


def test_unknown_nested_key(card):
    card["series"]["round"] = 3
    assert err(card).startswith("series.round: unknown key; allowed keys of series: rounds, steps, window")


def test_missing_keys(card):
    c = copy.deepcopy(card)
    del c["machine"]
    assert err(c).startswith("machine: missing")
    del card["series"]["window"]
    assert err(card).startswith("series.window: missing; required keys of series:")


def test_bad_dtype_model_mode_device(card):
    c = copy.deepcopy(card)
    c["dtypes"] = ["float32", "float64"]
    assert err(c) == "dtypes: 'float64' is not allowed; allowed: float32 | bfloat16 | float16"
    c = copy.deepcopy(card)
    c["models"] = ["gpt3"]
    msg = err(c)
    assert msg.startswith("models: 'gpt3' is not allowed; allowed: nanogpt | gpt2-small | gpt2-medium | tiny")
    c = copy.deepcopy(card)
    c["method_a"]["torch_mode"] = "turbo"
    assert err(c).startswith("method_a.torch_mode: 'turbo' is not allowed; allowed: eager | default")
    c = copy.deepcopy(card)
    c["device"] = "auto"
    assert err(c) == "device: 'auto' is not allowed; allowed: cpu | cuda"
    c = copy.deepcopy(card)
    c["torch_modes"] = []
    assert err(c).startswith("torch_modes: [] is not allowed; allowed: a non-empty list")
    c = copy.deepcopy(card)
    c["dtypes"] = ["float32", "float32"]
    assert err(c).startswith("dtypes: ['float32', 'float32'] lists 'float32' twice")


def test_windows(card):
    c = copy.deepcopy(card)
    c["series"]["window"] = [10, 400]  # steps is 40
    assert err(c).startswith("series.window: [10, 400] is not allowed; allowed: a window inside the run's steps 0..40")
    c = copy.deepcopy(card)
    c["series"]["window"] = [15, 40]
    assert "multiples of 10" in err(c)
    c = copy.deepcopy(card)
    c["series"]["window"] = [40, 10]
    assert err(c).startswith("series.window: [40, 10] is not allowed; allowed: [first, last]")
    c = copy.deepcopy(card)
    c["families"]["window"] = [20, 41]
    assert err(c).startswith("families.window: [20, 41]")


def test_wrong_types(card):
    c = copy.deepcopy(card)
    c["series"]["rounds"] = "5"
    assert err(c) == "series.rounds: '5' is not allowed; allowed: an integer from 1 to 100"
    c = copy.deepcopy(card)
    c["series"]["rounds"] = True
    assert err(c).startswith("series.rounds: True")
    c = copy.deepcopy(card)
    c["series"]["timeout_s"] = 0
    assert err(c).startswith("series.timeout_s: 0 is not allowed; allowed: a number from 10 to 604800")
    c = copy.deepcopy(card)
    c["half_roundings"] = ["yes"]
    assert err(c) == "half_roundings: 'yes' is not allowed; allowed: true | false"
    c = copy.deepcopy(card)
    c["series"] = [1, 2]
    assert err(c).startswith("series: [1, 2] is not allowed; allowed: a mapping with keys rounds")
    c = copy.deepcopy(card)
    c["card"] = "my card"
    assert err(c).startswith("card: 'my card' is not allowed")


def test_cross_key_checks(card):
    c = copy.deepcopy(card)
    c["method_a"]["judge_from"] = 41
    assert err(c).startswith("method_a.judge_from: 41 is not allowed; allowed: a step <= 40")
    c = copy.deepcopy(card)
    c["method_b"]["judge_steps"] = {"gpt3": 10}
    assert err(c).startswith("method_b.judge_steps.gpt3: unknown model")
    c = copy.deepcopy(card)
    c["method_b"]["judge_steps"] = {"tiny": 10}
    assert err(c) == ("method_b.judge_steps: {'tiny': 10} is not allowed; allowed: {} when method_b.window is floors "
                      "(the floors decide W)")
    c["method_b"]["window"] = "judge_steps"
    c["method_b"]["judge_steps"] = {"tiny": 21}
    assert err(c).startswith("method_b.judge_steps.tiny: 21 is not allowed; allowed: a step <= method_b.steps (20)")
    c = copy.deepcopy(card)
    c["method_a"]["steps"] = None  # the tiny model's max_iters (1000) then bounds judge_from
    c["method_a"]["judge_from"] = 1001
    assert "tiny's max_iters" in err(c)


def test_load_card_errors_are_one_line(tmp_path):
    with pytest.raises(Tr2Error, match=r"^card file: .* does not exist"):
        load_card(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("card: [unclosed\n  machine: x\n")
    with pytest.raises(Tr2Error) as e:
        load_card(bad)
    assert "not valid YAML" in str(e.value) and "\n" not in str(e.value)
    assert load_card("smoke")["card"] == "smoke"  # a bare name is looked up in params/cards/


def test_a_folder_is_no_card_file_but_a_name_is_still_a_name(tmp_path, monkeypatch):
    """--card DIR said "does not exist" of a folder that is there; a card's name still finds its card where a folder
    of that name lies in the working directory."""
    with pytest.raises(Tr2Error, match=r"^card file: '.*' is a folder; allowed: a YAML file"):
        load_card(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "smoke").mkdir()
    assert card_path("smoke") == CARDS / "smoke.yaml"


def test_card_from_notebook(card):
    ns = {**copy.deepcopy(card), "results_dir": None, "In": [], "tr2": sys}
    before = set(ns)
    ns.update({"_i3": "x", "_": None})  # IPython's history names are not parameters
    ns["series"] = {**ns["series"], "rounds": 3}  # the injection rebinds a defined key
    assert card_from_notebook(ns, before)["series"]["rounds"] == 3
    ns2 = dict(ns, colour="blue")
    with pytest.raises(Tr2Error, match=r"^colour: unknown key"):
        card_from_notebook(ns2, before)
    before3 = before - {"families"}  # a notebook that does not define a card key
    with pytest.raises(Tr2Error, match=r"^families: card key not defined in this notebook's parameters cell"):
        card_from_notebook(ns, before3)
    ns4 = dict(ns, dtypes=["float64"])
    with pytest.raises(Tr2Error, match=r"^dtypes: 'float64'"):
        card_from_notebook(ns4, before)


def test_a_notebook_checks_the_deadline_with_the_card(card, monkeypatch):
    """Under `papermill -f` a bad TR2_DEADLINE stopped the stage at its first run, after it made its folder."""
    ns = {**copy.deepcopy(card), "results_dir": None}
    before = set(ns)
    monkeypatch.setenv("TR2_DEADLINE", "abc")
    with pytest.raises(Tr2Error, match=r"^TR2_DEADLINE: 'abc' is not allowed"):
        card_from_notebook(ns, before)
    assert card_from_notebook({**ns, "render_only": True}, before | {"render_only"})["card"] == "smoke"   # runs nothing


def test_runner_rejects_a_bad_card_in_one_line(tmp_path, capsys):
    bad = yaml.safe_load((CARDS / "smoke.yaml").read_text())
    bad["series"]["rounds"] = 0
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(bad))
    assert runner.main(["series", "--card", str(p), "--root", str(tmp_path)]) == 2
    out = capsys.readouterr()
    assert out.err == "tr2.runner: error: series.rounds: 0 is not allowed; allowed: an integer from 1 to 100\n"
    assert out.out == ""
    assert runner.main(["dance", "--card", str(CARDS / "smoke.yaml"), "--root", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("tr2.runner: error: stage: 'dance' is not allowed")
    assert not any(tmp_path.glob("series-*"))


def test_runner_cli_exit_code():
    r = subprocess.run([sys.executable, "-m", "tr2.runner", "series", "--card", "/no/such/card.yaml"],
                       capture_output=True, text=True, cwd=REPO_ROOT)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "does not exist" in r.stderr


def test_runner_latest(tmp_path, capsys):
    for name in ("series-20261001-100000-cpu", "series-20261002-100000-cpu", "series-20261002-100000-cpu-2",
                 "series-20261003-100000-h200", "method_a-20261004-100000-cpu", "series-20261005-100000-cpu-b"):
        (tmp_path / name).mkdir()
    assert runner.latest("series", "cpu", tmp_path).name == "series-20261002-100000-cpu-2"
    assert runner.latest("series", "cpu-b", tmp_path).name == "series-20261005-100000-cpu-b"
    assert runner.latest("method_b", "cpu", tmp_path) is None
    assert runner.main(["latest", "series", "--card", "h200", "--root", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip().endswith("series-20261003-100000-h200")
    assert runner.main(["latest", "families", "--card", "h200", "--root", str(tmp_path)]) == 1
    (tmp_path / "series-20261001-100000-cpu" / "summary.json").write_text("{}")
    (tmp_path / "series-20261001-100000-cpu" / "series.ipynb").write_text("{}")
    assert runner.latest("series", "cpu", tmp_path, finished=True).name == "series-20261001-100000-cpu"


def test_runner_prepares_the_folder(tmp_path, monkeypatch):
    import tr2.sysinfo
    monkeypatch.setattr(tr2.sysinfo, "machine_info", lambda: {"host": "test"})
    (REPO_ROOT / "notebooks" / "series.ipynb").is_file() or pytest.skip("notebooks/series.ipynb not there yet")
    card, d, _f = runner.prepare("series", CARDS / "smoke.yaml", root=tmp_path)
    assert d.parent == tmp_path and d.name.startswith("series-") and d.name.endswith("-smoke")
    assert load_card(d / "card.yaml") == card and (d / "machine.json").is_file()
    card2, d2, f2 = runner.prepare("series", CARDS / "smoke.yaml", resume=d)
    assert f2 == d / "card.yaml"  # a resumed stage runs on the card its folder holds
    assert runner.prepare("series", None, resume=d)[:2] == (card, d)  # the folder knows its card
    assert d2 == d
    with pytest.raises(Tr2Error, match=r"^--resume: .* holds another card \(key 'card'"):
        runner.prepare("series", CARDS / "cpu.yaml", resume=d)
    other = tmp_path / "method_a-20261001-100000-smoke"
    other.mkdir()
    with pytest.raises(Tr2Error, match=r"^--resume: .* is a folder of stage method_a"):
        runner.prepare("series", CARDS / "smoke.yaml", resume=other)
    cmd = runner.papermill_command("series", CARDS / "smoke.yaml", d)
    assert cmd[1:3] == ["-m", "papermill"] and cmd[-6:] == ["-p", "results_dir", str(d), "-k", "python3", "--log-output"]


@pytest.mark.parametrize("machine, names, said", [
    ("nvidia-h200", ["NVIDIA H200"], None),
    ("nvidia-h200", ["NVIDIA H200 NVL"], None),
    ("nvidia-h200", ["NVIDIA H100 80GB HBM3"], "H200"),
    ("nvidia-h100", ["NVIDIA H100 80GB HBM3"], None),
    ("nvidia-h200", ["NVIDIA H100 80GB HBM3", "NVIDIA H200"], None),   # one of them is
    ("NVIDIA-H200 ", ["NVIDIA H200"], None),
    ("nvidia-h200", ["NVIDIA H2000"], "H200"),   # a model is a whole word
    ("nvidia-h200", [], None), ("nvidia-h200", None, None), ("cpu", ["NVIDIA H100 80GB HBM3"], None),
    (None, ["NVIDIA H200"], None), ("nvidia-h200", [None, " "], None),
])
def test_the_gpu_model_a_card_names_against_this_machines(machine, names, said):
    from tr2.cards import machine_gpu_mismatch
    assert machine_gpu_mismatch(machine, names) == said


def test_an_h200_card_on_an_h100_runs_with_one_line_saying_so(monkeypatch, capsys):
    import tr2.cards as cards
    c = load_card(CARDS / "smoke.yaml")
    c.update(device="cuda", machine="nvidia-h200")
    monkeypatch.setattr(cards, "cuda_available", lambda side: True)
    monkeypatch.setattr(cards, "gpu_names", lambda: ["NVIDIA H100 80GB HBM3"])
    monkeypatch.setenv("TR2_REQUIRE_PRODUCTS", "0")   # the products record: the next test's
    cards.check_machine(c)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["tr2: card smoke names machine 'nvidia-h200' and this machine's GPU is NVIDIA H100 80GB HBM3: its "
                   "runs time this GPU, not an H200 (machine.json and the report name it), and the GPU minutes "
                   "modelled from H200 runs do not apply"]
    monkeypatch.setenv("TR2_REQUIRE_CARD_GPU", "1")   # as scripts/edition_call.sh runs the stages
    with pytest.raises(Tr2Error) as e:
        cards.check_machine(c)
    assert str(e.value) == ("machine: card smoke names 'nvidia-h200' and this machine's GPU is NVIDIA H100 80GB HBM3; "
                            "allowed here (TR2_REQUIRE_CARD_GPU=1): run it where the GPU is an H200, or without "
                            "TR2_REQUIRE_CARD_GPU to time this GPU")
    monkeypatch.setattr(cards, "gpu_names", lambda: ["NVIDIA H200"])
    cards.check_machine(c)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("TR2_REQUIRE_CARD_GPU", "yes")   # not read as off: said, whatever the GPU
    with pytest.raises(Tr2Error, match=r"^TR2_REQUIRE_CARD_GPU: 'yes' is not allowed; allowed: 1 \(a card naming"):
        cards.check_machine(c)


def test_a_gpu_stage_without_the_products_record_stops_before_its_runs(tmp_path, monkeypatch):
    """A stage of a GPU card needs this GPU's products record (the protocol's amendment 4.3) unless
    TR2_REQUIRE_PRODUCTS=0: one line before any run. The fifty-ninth session's edition runs timed cuBLASLt's heuristic
    for want of this check, the record carried under its kept name."""
    import tr2.cards as cards
    c = load_card(CARDS / "smoke.yaml")
    c.update(device="cuda", machine="nvidia-h200")
    monkeypatch.setattr(cards, "cuda_available", lambda side: True)
    monkeypatch.setattr(cards, "gpu_names", lambda: ["NVIDIA H200"])
    monkeypatch.setenv("TR2_PRODUCTS_DIR", str(tmp_path))
    monkeypatch.delenv("TR2_REQUIRE_PRODUCTS", raising=False)
    (tmp_path / "nvidia-h200-cublaslt130100-35893974ed25.json").write_text("{}")   # a kept copy's name
    with pytest.raises(Tr2Error) as e:
        cards.check_machine(c)
    assert str(e.value) == ("no products record for this machine's GPU 'NVIDIA H200' (nvidia-h200-cublaslt<version>.json); "
                            f"{tmp_path} holds nvidia-h200-cublaslt130100-35893974ed25.json; allowed: `make products` "
                            "here first (the protocol's amendment 4.3: each product's cuBLASLt algorithm timed on the "
                            "card, once per GPU model and cuBLASLt version), a record placed there (`python -m "
                            "tr2.cupy_side.products --place FILE`), or TR2_REQUIRE_PRODUCTS=0 to time cuBLASLt's "
                            "heuristic choices instead (outside the protocol)")
    monkeypatch.setenv("TR2_REQUIRE_PRODUCTS", "1")   # as scripts/edition_call.sh runs the stages: the same
    with pytest.raises(Tr2Error, match=r"^no products record for this machine's GPU 'NVIDIA H200'"):
        cards.check_machine(c)
    monkeypatch.setenv("TR2_REQUIRE_PRODUCTS", "0")
    cards.check_machine(c)   # asked for: runs, the heuristic choosing
    monkeypatch.delenv("TR2_REQUIRE_PRODUCTS")
    (tmp_path / "nvidia-h200-cublaslt130100.json").write_text("{}")
    cards.check_machine(c)   # a record of its name: a run checks its own version (products.check_required)
    monkeypatch.setattr(cards, "gpu_names", lambda: ["NVIDIA H100 80GB HBM3"])
    with pytest.raises(Tr2Error, match=r"^no products record for this machine's GPU 'NVIDIA H100 80GB HBM3' "
                                       r"\(nvidia-h100-80gb-hbm3-cublaslt<version>"):
        cards.check_machine(c)
    monkeypatch.setenv("TR2_REQUIRE_PRODUCTS", "on")
    with pytest.raises(Tr2Error, match=r"^TR2_REQUIRE_PRODUCTS: 'on' is not allowed; allowed: 1 "):
        cards.check_machine(c)
    c.update(device="cpu")
    cards.check_machine(c)   # a CPU card's runs have no products to time


def test_runner_refuses_a_resume_on_another_gpu_model(tmp_path, monkeypatch):
    """--resume of a cuda card's folder where another GPU model came: one line naming --resume, before the notebook."""
    import tr2.sysinfo
    (REPO_ROOT / "notebooks" / "series.ipynb").is_file() or pytest.skip("notebooks/series.ipynb not there yet")
    text = (CARDS / "smoke.yaml").read_text()
    assert "device: cpu\n" in text
    cuda_card = tmp_path / "smoke-cuda.yaml"
    cuda_card.write_text(text.replace("device: cpu\n", "device: cuda\n").replace("card: smoke\n", "card: smoke-cuda\n"))
    monkeypatch.setattr(runner, "check_machine", lambda card: None)   # no GPU on this machine: the models' check only
    gpu = lambda name: (lambda: {"host": "test", "gpus": [{"name": name, "uuid": "GPU-0"}]})  # noqa: E731
    monkeypatch.setattr(tr2.sysinfo, "machine_info", gpu("NVIDIA H200"))
    _card, d, _f = runner.prepare("series", cuda_card, root=tmp_path)
    assert runner.prepare("series", None, resume=d)[1] == d
    monkeypatch.setattr(tr2.sysinfo, "machine_info", gpu("NVIDIA H100 80GB HBM3"))
    with pytest.raises(Tr2Error, match=r"^--resume: .* was started on NVIDIA H200 \(its machine.json\) and this "
                                       r"machine has NVIDIA H100 80GB HBM3; .*allowed: go on with it on NVIDIA H200"):
        runner.prepare("series", None, resume=d)


def test_torch_loops_default_to_ours_and_take_nanogpt_beside(card):
    assert card["torch_loops"] == ["torch"] and card["nanogpt_path"] == "../shared/nanoGPT"  # smoke leaves both out
    c = copy.deepcopy(card)
    c["torch_loops"] = ["torch", "nanogpt"]
    assert validate_card(c)["torch_loops"] == ["torch", "nanogpt"]
    c["torch_loops"] = ["nanogpt"]
    assert err(c) == ("torch_loops: ['nanogpt'] is not allowed; allowed: [torch] or [torch, nanogpt] "
                      "(our torch loop is always measured)")
    c["torch_loops"] = ["torch", "jax"]
    assert err(c) == "torch_loops: 'jax' is not allowed; allowed: torch | nanogpt"
    c["torch_loops"] = ["torch", "torch"]
    assert err(c).startswith("torch_loops: ['torch', 'torch'] lists 'torch' twice")
    c["torch_loops"], c["nanogpt_path"] = ["torch"], ""
    assert err(c) == "nanogpt_path: '' is not allowed; allowed: a non-empty string"


def test_a_card_with_nanogpt_needs_its_checkout_on_the_machine(card):
    from tr2.cards import check_machine
    c = {**card, "torch_loops": ["torch", "nanogpt"], "nanogpt_path": "/nonexistent/nanoGPT"}
    with pytest.raises(Tr2Error) as e:
        check_machine(c)
    assert str(e.value).startswith("nanogpt_path: '/nonexistent/nanoGPT' holds no train.py")
    check_machine({**c, "torch_loops": ["torch"]})  # not listed: the path is not read


def test_the_quick_h200_card_stays_small_and_covers_every_stage():
    """h200-quick (issue 11): all five stages in at most 10 H200 minutes. Unrun here (no GPU): what a CPU can hold
    it to is its size, the run counts its minutes were estimated from."""
    from tr2 import method_a, method_b, series
    from tr2.configs import configurations
    c = load_card(CARDS / "h200-quick.yaml")
    assert c["device"] == "cuda" and c["models"] == ["nanogpt"] and c["dtypes"] == ["bfloat16"]
    assert "max-autotune" not in c["torch_modes"]  # a cold max-autotune compile alone took 5 minutes
    assert len(series.plan(c)) == 6
    assert len(method_a.plan(c)) == 4
    assert [r["what"] for r in method_b.plan(c)] == ["init", "order", "torch", "cupy", "nanogpt", "floor-none",
                                                     "floor-once", "floor-every"]
    assert c["method_b"]["window"] == "floors"
    assert len(configurations(c)) == 2  # families: our torch side and the compared cupy build


def _edition_card(**edition) -> dict:
    """h200.yaml as a reduced edition of itself under another name: one mode less, the given `edition`."""
    c = load_card(CARDS / "h200.yaml")
    return {**c, "card": "h200-lean", "torch_modes": ["eager", "default"], "edition": edition}


def test_edition_is_null_when_left_out_and_names_the_published_card(card):
    assert card["edition"] is None and load_card(CARDS / "h200.yaml")["edition"] is None
    reason = "The GPU minutes granted hold half the full card's runs,\nso two compiled modes are left out."
    c = validate_card(_edition_card(of="h200", reason=reason))
    assert c["edition"] == {"of": "h200", "reason": reason}
    assert list(c).index("edition") == list(c).index("device") + 1   # the cards' order: after the device it depends on


def test_an_edition_must_name_the_published_card_of_its_device(card):
    published = "allowed: h200 (the published card for device cuda)"
    assert err(_edition_card(of="h300", reason="x")) == \
        f"edition.of: 'h300' does not exist (no params/cards/h300.yaml); {published}"
    assert err(_edition_card(of="h200-quick", reason="x")) == f"edition.of: 'h200-quick' is not allowed; {published}"
    assert err(_edition_card(of="my card", reason="x")).startswith("edition.of: 'my card' is not allowed; allowed: a name")
    assert err({**card, "edition": {"of": "h200", "reason": "x"}}) == (
        "edition.of: 'h200' is not allowed; allowed: none on a cpu card (edition: null): only cuda (h200) has a "
        "published card")
    h200 = load_card(CARDS / "h200.yaml")
    assert err({**h200, "edition": {"of": "h200", "reason": "x"}}) == (
        "edition.of: 'h200' is not allowed; allowed: none on h200 itself (edition: null): the full card reduces nothing")


def test_an_edition_is_a_mapping_of_the_card_and_one_paragraph_of_reason():
    assert err({**_edition_card(), "edition": "h200"}) == (
        "edition: 'h200' is not allowed; allowed: null (a card of its own), or a mapping with keys of, reason")
    assert err(_edition_card(of="h200")) == "edition.reason: missing; required keys of edition: of, reason"
    assert err(_edition_card(of="h200", reason="x", why="y")) == \
        "edition.why: unknown key; allowed keys of edition: of, reason"
    one_paragraph = "allowed: one paragraph of text (a non-empty string without a blank line)"
    assert err(_edition_card(of="h200", reason="  ")) == f"edition.reason: '  ' is not allowed; {one_paragraph}"
    assert err(_edition_card(of="h200", reason="first\n\nsecond")) == \
        f"edition.reason: 'first\\n\\nsecond' is not allowed; {one_paragraph}"
    assert err(_edition_card(of="h200", reason=["GPU minutes"])).startswith("edition.reason: ['GPU minutes'] is not")
