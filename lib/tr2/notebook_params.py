"""The stage notebooks' parameters cell, made from one place: the smoke card (params/cards/smoke.yaml).

papermill needs the defaults written out in the notebook (its `parameters` cell, which `-f CARD` and
`-p KEY VALUE` override), so each stage notebook holds a copy; this module writes that copy from the card
and a test checks it. After editing smoke.yaml: `python -m tr2.notebook_params` (`--check`: exit 1 where
a notebook differs, rewriting nothing).
"""
from __future__ import annotations

import json
import sys

import yaml

from . import PARAMS_DIR, REPO_ROOT
from .cards import CARD_KEYS, OPTIONAL, load_card
from .results import STAGES

HEAD = ("# Parameters: the smoke card's values (params/cards/smoke.yaml) and the optional keys' defaults;\n"
        "# papermill's -f CARD and -p KEY VALUE replace them")


def literal(v) -> str:
    """A YAML value as Python source (JSON's quotes for strings, Python's True/False/None)."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {literal(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(literal(x) for x in v) + "]"
    return json.dumps(v) if isinstance(v, str) else repr(v)


def parameters_source() -> str:
    path = PARAMS_DIR / "cards" / "smoke.yaml"
    load_card(path)  # a bad smoke card stops here, in one line
    card = yaml.safe_load(path.read_text())  # as written: optional keys it leaves out stay out
    # a top-level key the smoke card leaves out takes its OPTIONAL value here, so that a card giving it
    # (cuda_graph, torch_loops, nanogpt_path on the GPU cards) may rebind it through papermill
    values = {k: card[k] if k in card else OPTIONAL[k] for k in CARD_KEYS if k in card or k in OPTIONAL}
    lines = [HEAD] + [f"{k} = {literal(v)}" for k, v in values.items()]
    # `_names_before` lets tr2.cards.card_from_notebook tell what papermill's injected cell added
    return "\n".join(lines + ["results_dir = None   # None: a fresh results folder",
                              "render_only = False   # True: show a folder whose runs are done, run nothing "
                              "(python -m tr2.runner STAGE --render DIR)",
                              "_names_before = set(globals())"])


def sync(check: bool = False) -> list[str]:
    """The stage notebooks whose parameters cell differs from the smoke card's (rewritten unless check)."""
    want, differ = parameters_source(), []
    for stage in STAGES:
        path = REPO_ROOT / "notebooks" / f"{stage}.ipynb"
        nb = json.loads(path.read_text())
        cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
        if "".join(cell["source"]) != want:
            differ.append(stage)
            if not check:
                cell["source"] = want.splitlines(keepends=True)
                path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return differ


def main(argv: list[str]) -> int:
    # an argument mistyped (--chek) must not fall through to rewriting the notebooks
    if argv not in ([], ["--check"]):
        print(f"tr2.notebook_params: arguments {' '.join(argv)!r}; allowed: none (rewrite) or --check",
              file=sys.stderr)
        return 2
    check = argv == ["--check"]
    differ = sync(check=check)
    if differ:
        print(("differ from smoke.yaml: " if check else "rewritten: ") + ", ".join(differ))
    return 1 if differ and check else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
