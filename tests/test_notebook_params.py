"""The stage notebooks' defaults come from one place, the smoke card, and every executed stage shows its card."""
import json

from tr2 import REPO_ROOT, notebook_params
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
