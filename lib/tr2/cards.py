"""Cards: one YAML mapping of every parameter a stage needs, checked strictly before any work.

The schema is docs/architecture.md's "Cards". Every key is required (but the two of OPTIONAL), nothing
else is allowed, and a bad card stops with one line naming the key (dotted path, e.g. `series.rounds`),
the value and what is allowed. The top-level keys are the notebooks' papermill parameters;
`card_from_notebook` rebuilds the card from a notebook's globals after papermill's injection.
"""
from __future__ import annotations

import re
import types
from pathlib import Path

import yaml

from . import REPO_ROOT, Tr2Error
from .models import list_models, load_model
from .trainargs import DEVICES, DTYPES, MODES

CARD_DEVICES = tuple(d for d in DEVICES if d != "auto")  # a card is for one machine: cpu or cuda
LOG_INTERVAL = 10  # the trainer prints an iter line every 10 steps: the clock's window ends must fall on one
_NAME = re.compile(r"^[A-Za-z0-9._-]+$")

# key -> kind; a dict is a nested mapping. The order is the cards' order.
SCHEMA = {
    "card": "name",
    "machine": "text",
    "device": "device",
    "models": "models",
    "dtypes": "dtypes",
    "torch_modes": "modes",
    "half_roundings": "bools",
    "series": {
        "rounds": "pos_int",
        "steps": "pos_int",
        "window": "window",
        "timeout_s": "pos_number",
        "sample_interval_s": "pos_number",
    },
    "method_a": {
        "seeds": "seeds",
        "steps": "pos_int_or_null",
        "eval_interval": "pos_int_or_null",
        "eval_iters": "pos_int_or_null",
        "judge_from": "nonneg_int",
        "torch_mode": "mode",
    },
    "method_b": {
        "steps": "pos_int",
        "judge_steps": "judge_steps",
        "seed": "nonneg_int",
        "floors": "floors",
        "also": "also",
    },
    "families": {
        "steps": "pos_int",
        "window": "window",
        "rules": "text",
    },
}
CARD_KEYS = tuple(SCHEMA)
FLOOR_NAMES = ("none", "once", "every")  # method B's noise-floor runs (tr2.method_b)
ALSO_NAMES = ("cupy-again", "torch-default", "torch-reduce-overhead", "torch-max-autotune")  # tr2.method_b.ALSO's keys
# The only keys a card may leave out, with the value they take then: added after cards and results
# folders existed, so that those still read as they were run (all three floors, no extra runs).
OPTIONAL = {"method_b.floors": list(FLOOR_NAMES), "method_b.also": []}


def _fail(key: str, value, allowed: str):
    raise Tr2Error(f"{key}: {value!r} is not allowed; allowed: {allowed}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and v == v and v not in (float("inf"), float("-inf"))


def _list(key: str, value, allowed_desc: str) -> list:
    if not isinstance(value, (list, tuple)):
        _fail(key, value, f"a list of {allowed_desc}")
    if not value:
        _fail(key, value, f"a non-empty list of {allowed_desc}")
    seen = set()
    for v in value:
        try:
            hash(v)
        except TypeError:
            _fail(key, value, f"a list of {allowed_desc}")
        if (type(v), v) in seen:
            raise Tr2Error(f"{key}: {value!r} lists {v!r} twice; allowed: each value once")
        seen.add((type(v), v))
    return list(value)


def _one_of(key: str, value, allowed) -> None:
    if not isinstance(value, str) or value not in allowed:
        _fail(key, value, " | ".join(allowed))


def _check(kind: str, key: str, value):
    """The value checked and normalized (tuples to lists), or Tr2Error."""
    if kind == "name":
        if not isinstance(value, str) or not _NAME.match(value):
            _fail(key, value, "a name of letters, digits, '.', '_' and '-'")
        return value
    if kind == "text":
        if not isinstance(value, str) or not value.strip():
            _fail(key, value, "a non-empty string")
        return value
    if kind == "device":
        _one_of(key, value, CARD_DEVICES)
        return value
    if kind == "mode":
        _one_of(key, value, MODES)
        return value
    if kind in ("models", "dtypes", "modes"):
        allowed = {"models": list_models(), "dtypes": DTYPES, "modes": MODES}[kind]
        what = {"models": "models", "dtypes": "element types", "modes": "PyTorch modes"}[kind]
        items = _list(key, value, f"{what} from {' | '.join(allowed)}")
        for v in items:
            if not isinstance(v, str) or v not in allowed:
                origin = " (params/models.yaml)" if kind == "models" else ""
                raise Tr2Error(f"{key}: {v!r} is not allowed; allowed: {' | '.join(allowed)}{origin}")
        return items
    if kind == "bools":
        items = _list(key, value, "true | false")
        for v in items:
            if not isinstance(v, bool):
                raise Tr2Error(f"{key}: {v!r} is not allowed; allowed: true | false")
        return items
    if kind == "seeds":
        items = _list(key, value, "integers >= 0")
        for v in items:
            if not _is_int(v) or v < 0:
                raise Tr2Error(f"{key}: {v!r} is not allowed; allowed: integers >= 0")
        return items
    if kind == "pos_int":
        if not _is_int(value) or value < 1:
            _fail(key, value, "an integer >= 1")
        return value
    if kind == "nonneg_int":
        if not _is_int(value) or value < 0:
            _fail(key, value, "an integer >= 0")
        return value
    if kind == "pos_int_or_null":
        if value is not None and (not _is_int(value) or value < 1):
            _fail(key, value, "an integer >= 1, or null (the model's own)")
        return value
    if kind == "pos_number":
        if not _is_number(value) or value <= 0:
            _fail(key, value, "a number > 0")
        return value
    if kind == "window":
        if (not isinstance(value, (list, tuple)) or len(value) != 2 or not all(_is_int(v) for v in value)
                or not 0 <= value[0] < value[1]):
            _fail(key, value, "[first, last] steps, integers with 0 <= first < last")
        return list(value)
    if kind in ("floors", "also"):
        allowed = FLOOR_NAMES if kind == "floors" else ALSO_NAMES
        if not isinstance(value, (list, tuple)):
            _fail(key, value, f"a list (may be empty) of {' | '.join(allowed)}")
        for v in value:
            if not isinstance(v, str) or v not in allowed:
                raise Tr2Error(f"{key}: {v!r} is not allowed; allowed: {' | '.join(allowed)}")
        if len(set(value)) != len(value):
            raise Tr2Error(f"{key}: {list(value)!r} lists a value twice; allowed: each value once")
        return list(value)
    if kind == "judge_steps":
        if value is None:
            value = {}
        if not isinstance(value, dict):
            _fail(key, value, "a mapping model -> last judged step ({} for none)")
        models = list_models()
        out = {}
        for m, v in value.items():
            if m not in models:
                raise Tr2Error(f"{key}.{m}: unknown model; allowed: {' | '.join(models)} (params/models.yaml)")
            if not _is_int(v) or v < 0:
                _fail(f"{key}.{m}", v, "an integer >= 0 (the last judged step)")
            out[m] = v
        return out
    raise AssertionError(f"unknown kind {kind}")


def _check_mapping(schema: dict, d, prefix: str = "") -> dict:
    where = prefix.rstrip(".") or "card"
    if not isinstance(d, dict):
        raise Tr2Error(f"{where}: {d!r} is not allowed; allowed: a mapping with keys {', '.join(schema)}")
    for k in d:
        if k not in schema:
            raise Tr2Error(f"{prefix}{k}: unknown key; allowed keys{' of ' + where if prefix else ''}: {', '.join(schema)}")
    for k in schema:
        if k not in d and prefix + k in OPTIONAL:
            d = {**d, k: list(OPTIONAL[prefix + k])}
        if k not in d:
            raise Tr2Error(f"{prefix}{k}: missing; required keys{' of ' + where if prefix else ''}: {', '.join(schema)}")
    out = {}
    for k, kind in schema.items():
        key = prefix + k
        if isinstance(kind, dict):
            out[k] = _check_mapping(kind, d[k], key + ".")
        else:
            out[k] = _check(kind, key, d[k])
    return out


def validate_card(d) -> dict:
    """The card checked key by key and across keys; returns a normalized copy (lists, not tuples)."""
    c = _check_mapping(SCHEMA, d)
    s = c["series"]
    for key, window, steps, every in (("series.window", s["window"], s["steps"], LOG_INTERVAL),
                                      ("families.window", c["families"]["window"], c["families"]["steps"], 1)):
        if window[1] > steps:
            _fail(key, window, f"a window inside the run's steps 0..{steps} (its steps)")
        if every > 1 and (window[0] % every or window[1] % every):
            _fail(key, window, f"steps on which the trainer prints its iter line (multiples of {every})")
    a = c["method_a"]
    for m in c["models"]:
        cfg = load_model(m)
        steps = a["steps"] if a["steps"] is not None else cfg.max_iters
        interval = a["eval_interval"] if a["eval_interval"] is not None else cfg.eval_interval
        whose = f"{m}'s max_iters" if a["steps"] is None else "method_a.steps"
        if a["judge_from"] > steps:
            _fail("method_a.judge_from", a["judge_from"], f"a step <= {steps} ({whose})")
        if interval > steps:
            _fail("method_a.eval_interval", interval, f"at most {steps} ({whose})")
    b = c["method_b"]
    if b["floors"] and "none" not in b["floors"]:
        _fail("method_b.floors", b["floors"], "[] or a list holding none (the perturbed floor runs are measured "
                                              "against the unperturbed one)")
    for m, v in b["judge_steps"].items():
        if v > b["steps"]:
            _fail(f"method_b.judge_steps.{m}", v, f"a step <= method_b.steps ({b['steps']})")
    return c


def load_card(path) -> dict:
    """Read and validate a card file; every problem is one line."""
    path = Path(path)
    if not path.is_file():
        alt = REPO_ROOT / "params" / "cards" / f"{path}.yaml"
        if not path.suffix and alt.is_file():
            path = alt
        else:
            raise Tr2Error(f"card file: {str(path)!r} does not exist; allowed: a YAML file such as params/cards/cpu.yaml")
    try:
        d = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        first = " ".join(str(e).split())
        raise Tr2Error(f"card file {path}: not valid YAML: {first}") from None
    return validate_card(d)


def card_from_notebook(namespace: dict, names_before: set) -> dict:
    """The card a notebook runs with, from its globals after papermill's injected cell.

    The parameters cell defines every card key and ends with `_names_before = set(globals())`;
    papermill's injected cell may only rebind those names. A name it added is an error: either it is
    no card key, or it is a card key this notebook does not define. Names starting with '_' (IPython's
    history) and modules are not parameters.
    """
    added = sorted(n for n in set(namespace) - set(names_before)
                   if not n.startswith("_") and not isinstance(namespace[n], types.ModuleType))
    for n in added:
        if n in SCHEMA:
            raise Tr2Error(f"{n}: card key not defined in this notebook's parameters cell; add it there")
        raise Tr2Error(f"{n}: unknown key; allowed keys: {', '.join(CARD_KEYS)} (and results_dir)")
    missing = [k for k in CARD_KEYS if k not in namespace]
    if missing:
        raise Tr2Error(f"{missing[0]}: missing from the notebook's parameters cell; required keys: {', '.join(CARD_KEYS)}")
    return validate_card({k: namespace[k] for k in CARD_KEYS})


def held_card_difference(folder, card: dict):
    """(key, value in the folder's card.yaml, value in `card`) for the first top-level key where the card a
    results folder was started with differs from `card`; None when they agree or the folder holds none."""
    path = Path(folder) / "card.yaml"
    if not path.is_file():
        return None
    held = validate_card(yaml.safe_load(path.read_text()))
    if held == card:
        return None
    key = next(k for k in card if held.get(k) != card.get(k))
    return key, held.get(key), card.get(key)


def dump_card(card: dict) -> str:
    return yaml.safe_dump(card, sort_keys=False)
