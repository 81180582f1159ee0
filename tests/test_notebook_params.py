"""The stage notebooks' defaults come from one place, the smoke card, and every executed stage shows its card."""
import json

import pytest
import yaml

from tr2 import REPO_ROOT, cards, notebook_params
from tr2.stage import STAGES


def test_every_stage_notebooks_parameters_are_the_smoke_cards():
    assert notebook_params.sync(check=True) == []  # after editing smoke.yaml: python -m tr2.notebook_params
    src = notebook_params.parameters_source()
    assert 'card = "smoke"' in src and "half_roundings = [False, True]" in src and src.endswith("set(globals())")


def test_literals_are_python_source():
    v = {"a": [1, 2.5, True, None], "b": {}, "c": "x y"}
    assert eval(notebook_params.literal(v)) == v


def test_every_stage_notebook_shows_its_card():
    for stage in STAGES:
        nb = json.loads((REPO_ROOT / "notebooks" / f"{stage}.ipynb").read_text())
        sources = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
        at = next(i for i, s in enumerate(sources) if "card_from_notebook" in s)
        assert "tr2.cards.dump_card(card)" in sources[at + 1], stage


@pytest.mark.parametrize("card", sorted(p.stem for p in (REPO_ROOT / "params" / "cards").glob("*.yaml")))
def test_every_card_can_be_handed_to_the_notebooks(card, monkeypatch):
    """papermill -f CARD rebinds the parameters cell's names: each key of every committed card must be one of
    them (the h200 cards' cuda_graph, torch_loops and nanogpt_path were not, and every stage stopped)."""
    namespace = {}
    exec(notebook_params.parameters_source(), namespace)
    before = namespace["_names_before"]
    namespace.update(yaml.safe_load((REPO_ROOT / "params" / "cards" / f"{card}.yaml").read_text()))  # papermill's cell
    monkeypatch.setattr(cards, "check_machine", lambda c: None)   # the machine is the runner's to check
    monkeypatch.setattr(cards, "papermill_card_files", lambda: [])
    assert cards.card_from_notebook(namespace, before)["card"] == card


def test_a_reduced_edition_can_be_handed_to_the_notebooks(monkeypatch):
    """`edition` is a parameter like any card key: None in the cell (the smoke card has none), rebound by papermill
    from a card that is the published card's reduced edition (no such card is committed yet)."""
    src = notebook_params.parameters_source()
    assert "\nedition = None\n" in src
    namespace = {}
    exec(src, namespace)
    before = namespace["_names_before"]
    card = yaml.safe_load((REPO_ROOT / "params" / "cards" / "h200.yaml").read_text())
    edition = {"of": "h200", "reason": "The GPU minutes hold one round."}
    namespace.update({**card, "card": "h200-lean", "edition": edition, "series": {**card["series"], "rounds": 1}})
    monkeypatch.setattr(cards, "check_machine", lambda c: None)
    monkeypatch.setattr(cards, "papermill_card_files", lambda: [])
    assert cards.card_from_notebook(namespace, before)["edition"] == edition


def test_every_notebook_cell_has_an_id():
    """nbformat 4.5's cell ids (in the notebooks of that format; explore.ipynb is 4.4, which has none): a cell added
    without one validates today with a warning and fails in a later nbformat (a families cell of the twenty-eighth
    session lacked one); unique within each notebook."""
    checked = 0
    for path in sorted((REPO_ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        if (nb["nbformat"], nb["nbformat_minor"]) < (4, 5):
            continue
        checked += 1
        ids = [c.get("id") for c in nb["cells"]]
        assert all(isinstance(i, str) and i for i in ids), (path.name, [n for n, i in enumerate(ids) if not i])
        assert len(set(ids)) == len(ids), path.name
    assert checked >= 5   # the five stage notebooks


def test_a_mistyped_argument_rewrites_nothing(capsys, monkeypatch):
    monkeypatch.setattr(notebook_params, "sync", lambda check=False: pytest.fail("sync ran"))
    assert notebook_params.main(["--chek"]) == 2
    err = capsys.readouterr().err
    assert "'--chek'" in err and "allowed: none (rewrite) or --check" in err and len(err.strip().splitlines()) == 1
    assert notebook_params.main(["--check", "--check"]) == 2


def test_check_reports_without_rewriting(capsys, monkeypatch):
    calls = []
    monkeypatch.setattr(notebook_params, "sync", lambda check=False: calls.append(check) or ["series"])
    assert notebook_params.main(["--check"]) == 1 and calls == [True]
    assert "differ from smoke.yaml: series" in capsys.readouterr().out
