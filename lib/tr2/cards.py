"""Cards: one YAML mapping of every parameter a stage needs, checked strictly before any work.

The schema is docs/architecture.md's "Cards". Every key is required (but those of OPTIONAL), nothing
else is allowed, and a bad card stops with one line naming the key (dotted path, e.g. `series.rounds`),
the value and what is allowed. The top-level keys are the notebooks' papermill parameters;
`card_from_notebook` rebuilds the card from a notebook's globals after papermill's injection.
"""
from __future__ import annotations

import math
import os
import re
import sys
import types
from operator import itemgetter
from pathlib import Path

import yaml

from . import REPO_ROOT, Tr2Error
from .data import DATA_FILES, data_file
from .models import list_models, load_model
from .papermill_hook import card_files
from .results import NAME
from .trainargs import DEVICES, DTYPES, MODES, SEED_MAX, TORCH_LOOPS, checkout_path, cuda_available

CARD_DEVICES = tuple(d for d in DEVICES if d != "auto")  # a card is for one machine: cpu or cuda
LOG_INTERVAL = 10  # the trainer prints an iter line every 10 steps: the clock's window ends must fall on one
# Upper (and for times, lower) bounds: a value outside them is a typo, not a plan. A run shorter than
# MIN_TIMEOUT_S cannot even start Python and import torch, so a smaller timeout times every run out.
MIN_TIMEOUT_S = 10
BOUNDS = {
    "series.rounds": (1, 100), "series.steps": (1, 100_000), "series.timeout_s": (MIN_TIMEOUT_S, 7 * 86400),
    "series.sample_interval_s": (0.05, 60), "method_a.steps": (1, 100_000), "method_a.eval_interval": (1, 100_000),
    "method_a.eval_iters": (1, 10_000), "method_a.judge_from": (0, 100_000), "method_b.steps": (1, 100_000),
    "method_b.seed": (0, SEED_MAX), "method_a.seeds": (0, SEED_MAX), "families.steps": (1, 100_000),
    "method_a.parallel": (1, 16),
}

# The card whose runs are the published edition, by device (protocol rule 9). Any other card is preparation,
# unless its `edition` names the one here: then it is the published edition, reduced from that full card.
PUBLISHED = {"cuda": "h200"}
# `edition`'s keys: the published card this card stands in for, and why it runs less than that card.
EDITION = {"of": "name", "reason": "paragraph"}

# key -> kind; a dict is a nested mapping, [kind] a list of distinct values of that kind. The order is the cards'.
SCHEMA = {
    "card": "name",
    "machine": "text",
    "device": "device",
    "edition": "edition",   # after device: which card it may name depends on the device
    "models": ["model"],
    "dtypes": ["dtype"],
    "torch_modes": ["mode"],
    "half_roundings": ["bool"],
    "cuda_graph": "bool",
    "torch_loops": ["loop"],
    "nanogpt_path": "text",
    "series": {
        "rounds": "int",
        "steps": "int",
        "window": "window",
        "timeout_s": "number",
        "sample_interval_s": "number",
    },
    "method_a": {
        "seeds": ["seed"],
        "steps": "int_or_null",
        "eval_interval": "int_or_null",
        "eval_iters": "int_or_null",
        "judge_from": "int",
        "torch_mode": "mode",
        "parallel": "int",   # runs sharing the machine at once (a correctness check, not a timing; tr2.method_a)
    },
    "method_b": {
        "steps": "int",
        "judge_steps": "judge_steps",
        "window": "window_rule",
        "seed": "int",
        "floors": ["floor"],
        "also": ["also"],
    },
    "families": {
        "steps": "int",
        "window": "window",
        "rules": "text",
    },
}
CARD_KEYS = tuple(SCHEMA)
# method B's judged window (tr2.method_b): from the floors (issue 11: W, the last step every floor run stays
# within 0.5%) or the fixed judge_steps of protocol rule 52 (how the cards before that rule were run)
WINDOW_RULES = ("floors", "judge_steps")
FLOOR_NAMES = ("none", "once", "every")  # method B's noise-floor runs (tr2.method_b)
ALSO_NAMES = ("cupy-again", "torch-default", "torch-reduce-overhead", "torch-max-autotune")  # tr2.method_b.ALSO's keys
# The only keys a card may leave out, with the value they take then: added after cards and results
# folders existed, so that those still read as they were run (all three floors, no extra runs, our torch
# loop alone; nanoGPT's checkout beside the repository, read only where torch_loops lists nanogpt).
# method_b.window: judge_steps (the fixed windows, protocol rule 52) for cards written before issue 11's rule.
# edition: null, a card of its own (the published one, a preview, the CPU's), as every card before the key was.
# method_a.parallel: 1, one run at a time, as every method A before the key ran.
OPTIONAL = {"edition": None, "method_b.floors": list(FLOOR_NAMES), "method_b.also": [], "method_b.window": "judge_steps",
            "method_a.parallel": 1,
            "cuda_graph": False,
            "torch_loops": ["torch"], "nanogpt_path": "../shared/nanoGPT"}
CHOICES = {"device": CARD_DEVICES, "mode": MODES, "dtype": DTYPES, "loop": TORCH_LOOPS, "window_rule": WINDOW_RULES,
           "floor": FLOOR_NAMES, "also": ALSO_NAMES}
PLAIN = {  # kind -> (the test a value passes, what is allowed)
    "name": (lambda v: isinstance(v, str) and bool(NAME.match(v)), "a name of letters, digits, '.', '_' and '-'"),
    "text": (lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty string"),
    # the front page shows it as one paragraph: a blank line would be a second one
    "paragraph": (lambda v: isinstance(v, str) and bool(v.strip()) and not re.search(r"\n[ \t]*\n", v.strip()),
                  "one paragraph of text (a non-empty string without a blank line)"),
    "bool": (lambda v: isinstance(v, bool), "true | false"),
    "window": (lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and all(map(_is_int, v)) and 0 <= v[0] < v[1],
               "[first, last] steps, integers with 0 <= first < last"),
}
NOUNS = {"model": "models", "dtype": "element types", "mode": "PyTorch modes"}  # a list's items, named in its message


def _fail(key: str, value, allowed: str):
    raise Tr2Error(f"{key}: {value!r} is not allowed; allowed: {allowed}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _rule(kind: str, key: str) -> tuple:
    """(the test a value of `kind` at `key` passes, what is allowed); numbers within the key's BOUNDS."""
    lo, hi = BOUNDS.get(key, (None, None))
    if kind in ("int", "int_or_null", "seed"):
        null = ", or null (the model's own)" if kind == "int_or_null" else ""
        return ((lambda v: (_is_int(v) and lo <= v <= hi) or (null and v is None)),
                f"integers from {lo} to {hi}" if kind == "seed" else f"an integer from {lo} to {hi}{null}")
    if kind == "number":
        return (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                and lo <= v <= hi), f"a number from {lo:g} to {hi:g}"
    if kind == "model" or kind in CHOICES:
        allowed = list_models() if kind == "model" else CHOICES[kind]
        return (lambda v: isinstance(v, str) and v in allowed), " | ".join(allowed)
    return PLAIN[kind]


def _check_list(kind: str, key: str, value) -> list:
    test, allowed = _rule(kind, key)
    may_be_empty = kind in ("floor", "also")  # method B may run no floor and no extra run
    what = f"{NOUNS[kind]} from {allowed}" if kind in NOUNS else allowed
    if not isinstance(value, (list, tuple)):
        _fail(key, value, f"a list (may be empty) of {allowed}" if may_be_empty else f"a list of {what}")
    if not may_be_empty:
        if not value:
            _fail(key, value, f"a non-empty list of {what}")
        seen = set()
        for v in value:
            try:
                hash(v)
            except TypeError:
                _fail(key, value, f"a list of {what}")
            if (type(v), v) in seen:
                raise Tr2Error(f"{key}: {value!r} lists {v!r} twice; allowed: each value once")
            seen.add((type(v), v))
    for v in value:
        if not test(v):
            _fail(key, v, allowed + (" (params/models.yaml)" if kind == "model" else ""))
    if may_be_empty and len(set(value)) != len(value):
        raise Tr2Error(f"{key}: {list(value)!r} lists a value twice; allowed: each value once")
    if kind == "loop" and "torch" not in value:  # our torch loop always (method B and the families stand on it)
        _fail(key, value, "[torch] or [torch, nanogpt] (our torch loop is always measured)")
    return list(value)


def _check(kind, key: str, value):
    """The value checked and normalized (tuples to lists), or Tr2Error."""
    if isinstance(kind, dict):
        return _check_mapping(kind, value, key + ".")
    if isinstance(kind, list):
        return _check_list(kind[0], key, value)
    if kind == "edition":
        if value is not None and not isinstance(value, dict):
            _fail(key, value, f"null (a card of its own), or a mapping with keys {', '.join(EDITION)}")
        return value if value is None else _check_mapping(EDITION, value, key + ".")
    if kind == "judge_steps":
        if value is None:
            value = {}
        if not isinstance(value, dict):
            _fail(key, value, "a mapping model -> last judged step ({} for none)")
        models = list_models()
        for m, v in value.items():
            if m not in models:
                raise Tr2Error(f"{key}.{m}: unknown model; allowed: {' | '.join(models)} (params/models.yaml)")
            if not _is_int(v) or v < 0:
                _fail(f"{key}.{m}", v, "an integer >= 0 (the last judged step)")
        return dict(value)
    test, allowed = _rule(kind, key)
    if not test(value):
        _fail(key, value, allowed)
    return list(value) if kind == "window" else value


def _check_mapping(schema: dict, d, prefix: str = "") -> dict:
    where = prefix.rstrip(".") or "card"
    if not isinstance(d, dict):
        raise Tr2Error(f"{where}: {d!r} is not allowed; allowed: a mapping with keys {', '.join(schema)}")
    for k in d:
        if k not in schema:
            raise Tr2Error(f"{prefix}{k}: unknown key; allowed keys{' of ' + where if prefix else ''}: {', '.join(schema)}")
    for k in schema:
        if k not in d and prefix + k in OPTIONAL:
            v = OPTIONAL[prefix + k]
            d = {**d, k: list(v) if isinstance(v, list) else v}
        if k not in d:
            raise Tr2Error(f"{prefix}{k}: missing; required keys{' of ' + where if prefix else ''}: {', '.join(schema)}")
    return {k: _check(kind, prefix + k, d[k]) for k, kind in schema.items()}


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
        steps, interval = itemgetter("steps", "eval_interval")(method_a_schedule(c, m))
        whose = f"{m}'s max_iters" if a["steps"] is None else "method_a.steps"
        if a["judge_from"] > steps:
            _fail("method_a.judge_from", a["judge_from"], f"a step <= {steps} ({whose})")
        if interval > steps:
            _fail("method_a.eval_interval", interval, f"at most {steps} ({whose})")
    if c["cuda_graph"] and c["device"] != "cuda":
        _fail("cuda_graph", True, "false on a cpu card (the whole-step graph is the cupy side's on a GPU)")
    b = c["method_b"]
    if b["floors"] and "none" not in b["floors"]:
        _fail("method_b.floors", b["floors"], "[] or a list holding none (the perturbed floor runs are measured "
                                              "against the unperturbed one)")
    if b["window"] == "floors" and b["judge_steps"]:
        _fail("method_b.judge_steps", b["judge_steps"], "{} when method_b.window is floors (the floors decide W)")
    if b["window"] == "floors" and not b["floors"] and "nanogpt" not in c["torch_loops"]:
        _fail("method_b.floors", b["floors"], "at least [none] when method_b.window is floors (W comes from them)")
    for m, v in b["judge_steps"].items():
        if v > b["steps"]:
            _fail(f"method_b.judge_steps.{m}", v, f"a step <= method_b.steps ({b['steps']})")
    if c["edition"] is not None:
        _check_edition(c["card"], c["device"], c["edition"]["of"])
    return c


def method_a_schedule(card: dict, model: str) -> dict:
    """steps, eval_interval, eval_iters of method A for one model under the card (null: the model's own)."""
    cfg, a = load_model(model), card["method_a"]
    own = {"steps": cfg.max_iters, "eval_interval": cfg.eval_interval, "eval_iters": cfg.eval_iters}
    return {k: own[k] if a[k] is None else a[k] for k in own}


def _check_edition(card: str, device: str, of: str) -> None:
    """A card may stand in only for the published card of its own device, one that is there to run in full
    (the front page points to it), and never for itself."""
    published = PUBLISHED.get(device)
    if published is None:
        _fail("edition.of", of, f"none on a {device} card (edition: null): only "
                                f"{' | '.join(f'{d} ({n})' for d, n in PUBLISHED.items())} has a published card")
    allowed = f"{published} (the published card for device {device})"
    if not (REPO_ROOT / "params" / "cards" / f"{of}.yaml").is_file():
        raise Tr2Error(f"edition.of: {of!r} does not exist (no params/cards/{of}.yaml); allowed: {allowed}")
    if of != published:
        _fail("edition.of", of, allowed)
    if card == published:
        _fail("edition.of", of, f"none on {published} itself (edition: null): the full card reduces nothing")


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a key given twice in one mapping is an error (PyYAML keeps the last)."""


def _no_duplicates(loader, node, deep=False):
    seen = {}
    for key_node, _v in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:   # `? [a, b]`: PyYAML's own TypeError would end in a traceback
            start, end = key_node.start_mark, key_node.end_mark
            text = " ".join((start.buffer or "")[start.index:end.index].split())   # the key as the file writes it
            raise Tr2Error(f"{text!r}: a {type(key).__name__} as a key (line {start.line + 1}); allowed: keys that "
                           "are names") from None
        if key in seen:
            raise Tr2Error(f"{key}: given twice (lines {seen[key] + 1} and {key_node.start_mark.line + 1}); "
                           "allowed: each key once")
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def card_path(arg) -> Path:
    """A card given by path or by name (params/cards/NAME.yaml); a missing one is one line."""
    path = Path(arg)
    if path.is_file():
        return path
    alt = REPO_ROOT / "params" / "cards" / f"{arg}.yaml"
    if not path.suffix and "/" not in str(arg) and alt.is_file():
        return alt
    if path.is_dir() and str(arg):
        raise Tr2Error(f"card file: {str(arg)!r} is a folder; allowed: a YAML file such as params/cards/cpu.yaml, "
                       "or a card's name")
    names = " | ".join(sorted(p.stem for p in (REPO_ROOT / "params" / "cards").glob("*.yaml")))
    raise Tr2Error(f"card file: {str(arg)!r} does not exist; allowed: a YAML file such as params/cards/cpu.yaml, "
                   f"or a name: {names}")


def card_name(arg: str) -> str:
    """The card's name from a name or a file; a name with no card file under params/cards/ stays a name (the
    folders of a card that is not in this checkout can still be listed and reported)."""
    p = Path(arg)
    if p.suffix in (".yaml", ".yml") or p.is_file() or "/" in arg:
        return load_card(p)["card"]
    return arg


_KIND = {list: "a list", int: "a number", float: "a number", str: "a string", bool: "a boolean"}


def read_card_file(path) -> dict:
    """The mapping a card file holds, unchecked against the schema: one line for a file that is not
    UTF-8 text, not YAML, empty, not a mapping, or gives a key twice."""
    path = card_path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as e:
        raise Tr2Error(f"card file {path}: cannot be read ({e.strerror}); allowed: a readable YAML file") from None
    except UnicodeDecodeError:
        raise Tr2Error(f"card file {path}: not text (not UTF-8); allowed: a YAML mapping such as "
                       "params/cards/cpu.yaml") from None
    if "\0" in text:
        raise Tr2Error(f"card file {path}: holds NUL bytes, not text; allowed: a YAML mapping such as "
                       "params/cards/cpu.yaml")
    try:
        d = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as e:
        first = " ".join(str(e).split())
        raise Tr2Error(f"card file {path}: not valid YAML: {first}") from None
    except Tr2Error as e:
        raise Tr2Error(f"card file {path}: {e}") from None
    if d is None:
        raise Tr2Error(f"card file {path}: empty; allowed: a mapping with keys {', '.join(CARD_KEYS)}")
    if not isinstance(d, dict):
        raise Tr2Error(f"card file {path}: holds {_KIND.get(type(d), 'a ' + type(d).__name__)}, not a mapping; allowed: a "
                       f"mapping with keys {', '.join(CARD_KEYS)}")
    return d


def load_card(path) -> dict:
    """Read and validate a card file (a path, or a name under params/cards/); every problem is one line."""
    return validate_card(read_card_file(path))


def machine_gpu_mismatch(machine, gpu_names) -> str | None:
    """The GPU model a card's `machine` names (nvidia-<model>: 'nvidia-h200' -> 'H200') where none of this machine's
    GPUs (nvidia-smi's names) is of that model; None where one is, where the card names no NVIDIA model (cpu), or
    where no GPU name is known."""
    m = re.fullmatch(r"nvidia-([a-z0-9]+)", str(machine or "").strip().lower())
    names = [n for n in gpu_names or [] if isinstance(n, str) and n.strip()]
    if not m or not names:
        return None
    model = m.group(1)
    if any(re.search(rf"\b{model}\b", n.lower()) for n in names):
        return None
    return model.upper()


def gpu_names() -> list[str]:
    from . import sysinfo   # here: nvidia-smi only where a card asks for a GPU
    return [g["name"] for g in sysinfo.gpu_info()]


def check_machine(card: dict) -> None:
    """What the card needs of the machine it runs on, checked before any run: a CUDA device for a cuda card
    (seen by torch and by CuPy: both sides run on it), and every data file its models read, present and
    verified (md5). A problem is one line (Tr2Error). A cuda card whose `machine` names another GPU model than this
    machine's (the H200 cards on an H100) runs, with one line on stderr saying so: its folders time this GPU; with
    TR2_REQUIRE_CARD_GPU=1 in the environment (scripts/edition_call.sh sets it: an edition's device minutes are
    scarce) it is refused instead. A cuda card also needs this GPU's products record (check_products_record)."""
    if card["device"] == "cuda":
        missing = [side for side in ("torch", "cupy") if not cuda_available(side)]
        if missing:
            raise Tr2Error(f"device: 'cuda' but this machine has no CUDA device that {' or '.join(missing)} can use; "
                           "allowed here: cpu (e.g. --card cpu), or run the card where nvidia-smi sees a GPU")
        require = os.environ.get("TR2_REQUIRE_CARD_GPU", "").strip()
        if require not in ("", "0", "1"):
            raise Tr2Error(f"TR2_REQUIRE_CARD_GPU: {require!r} is not allowed; allowed: 1 (a card naming another GPU "
                           "model than this machine's is refused), 0 or unset (it runs, with one line saying so)")
        names = gpu_names()
        wanted = machine_gpu_mismatch(card.get("machine"), names)
        here = " + ".join(sorted(set(names)))
        if wanted and require == "1":
            raise Tr2Error(f"machine: card {card['card']} names {card['machine']!r} and this machine's GPU is "
                           f"{here}; allowed here (TR2_REQUIRE_CARD_GPU=1): run it where "
                           f"the GPU is an {wanted}, or without TR2_REQUIRE_CARD_GPU to time this GPU")
        if wanted:
            sys.stderr.write(f"tr2: card {card['card']} names machine {card['machine']!r} and this machine's GPU is "
                             f"{here}: its runs time this GPU, not an {wanted} (machine.json "
                             f"and the report name it), and the GPU minutes modelled from {wanted} runs do not apply\n")
        check_products_record(names)
    for m in card["models"]:
        for name in DATA_FILES[load_model(m).dataset]:
            data_file(name)
    if "nanogpt" in card["torch_loops"]:
        checkout_path(card["nanogpt_path"], key="nanogpt_path")
    check_rules(card)


def check_products_record(names: list[str]) -> None:
    """The cupy runs' products record for this machine's GPU is in the record folder before any run of a GPU card
    starts (some cuBLASLt version of it: a run checks its own where TR2_REQUIRE_PRODUCTS=1,
    cupy_side.products.check_required): the protocol's amendment 4.3 times the products on the card, and without a
    record cuBLASLt's heuristic would choose them, silently (the fifty-ninth session's edition runs). On unless
    TR2_REQUIRE_PRODUCTS=0."""
    from .cupy_side import products   # here: the record's names, no GPU needed
    try:
        if not products.required(default=True):
            return
    except products.RecordError as e:
        raise Tr2Error(str(e)) from None
    for name in sorted(set(names)):
        if not products.records_for(name):
            raise Tr2Error(f"no products record for this machine's GPU {name!r} "
                           f"({products.slug(name)}-cublaslt<version>.json); {products.folder_listing(products.record_dir())}; "
                           "allowed: `make products` here first (the protocol's amendment 4.3: each product's cuBLASLt "
                           "algorithm timed on the card, once per GPU model and cuBLASLt version), a record placed there "
                           "(`python -m tr2.cupy_side.products --place FILE`), or TR2_REQUIRE_PRODUCTS=0 to time "
                           "cuBLASLt's heuristic choices instead (outside the protocol)")


def check_rules(card: dict) -> None:
    """The card's rules file read and parsed as the families stage reads it, for every stage (the card is checked
    whole): a bad line would otherwise stop the families stage after its results folder was made."""
    from .families import parse_rules  # here: tr2.families imports this module
    given, path = card["families"]["rules"], rules_path(card)
    allowed = "a UTF-8 TSV file of pattern<TAB>family lines such as params/families.tsv"
    if not path.is_file():
        said = "is a folder" if path.is_dir() else "does not exist"
        raise Tr2Error(f"families.rules: {given!r} {said}; allowed: {allowed}")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as e:
        raise Tr2Error(f"families.rules: {given!r} cannot be read ({e.strerror}); allowed: {allowed}") from None
    except UnicodeDecodeError:
        raise Tr2Error(f"families.rules: {given!r} is not text (not UTF-8); allowed: {allowed}") from None
    try:
        rules = parse_rules(text, given)
    except Tr2Error as e:
        raise Tr2Error(f"families.rules: {e}") from None
    if not rules:   # every kernel would be "other": no family to table
        raise Tr2Error(f"families.rules: {given!r} holds no rule; allowed: {allowed}")


def rules_path(card: dict) -> Path:
    """The card's families.rules file (a relative path is read from the repository's root)."""
    p = Path(card["families"]["rules"])
    return p if p.is_absolute() else REPO_ROOT / p


def papermill_card_files() -> list[Path]:
    """The -f files of the papermill process that started this kernel, or [] (not under papermill, or not on
    Linux). papermill hands a notebook only the merged values: a key given twice, an empty file or a missing
    mapping is invisible from inside, so the notebook reads the files papermill was given itself."""
    proc = Path(f"/proc/{os.getppid()}")
    try:
        argv = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return []
    args = [a.decode("utf-8", "replace") for a in argv if a]
    if not any(Path(a).name == "papermill" for a in args[:3]):
        return []
    cwd = (proc / "cwd").resolve() if (proc / "cwd").exists() else Path.cwd()
    return [cwd / f for f in card_files(args)]


def card_from_notebook(namespace: dict, names_before: set) -> dict:
    """The card a notebook runs with, from its globals after papermill's injected cell.

    The parameters cell defines every card key and ends with `_names_before = set(globals())`;
    papermill's injected cell may only rebind those names. A name it added is an error: either it is
    no card key, or it is a card key this notebook does not define. Names starting with '_' (IPython's
    history) and modules are not parameters. With `render_only` set (the runner's --render) the card is not checked
    against this machine: the notebook then shows a folder whose runs are done and runs nothing.
    """
    files = papermill_card_files()
    if files:
        # papermill merges its -f files in order; the merged mapping must be a whole card by itself (an empty
        # file or one without a stage's mapping would otherwise run on the notebook's smoke defaults).
        merged = {}
        for f in files:
            merged.update(read_card_file(f))
        validate_card(merged)
    added = sorted(n for n in set(namespace) - set(names_before)
                   if not n.startswith("_") and not isinstance(namespace[n], types.ModuleType))
    for n in added:
        if n in SCHEMA:
            raise Tr2Error(f"{n}: card key not defined in this notebook's parameters cell; add it there")
        raise Tr2Error(f"{n}: unknown key; allowed keys: {', '.join(CARD_KEYS)} (and results_dir)")
    required = [k for k in CARD_KEYS if k not in OPTIONAL]
    missing = [k for k in required if k not in namespace]
    if missing:
        raise Tr2Error(f"{missing[0]}: missing from the notebook's parameters cell; required keys: {', '.join(required)}")
    card = validate_card({k: namespace[k] for k in CARD_KEYS if k in namespace})
    if not namespace.get("render_only"):   # rendering a finished folder runs nothing: any machine will do
        check_machine(card)
        from .stage import deadline  # here: tr2.stage imports this module
        deadline()   # read at the first run, after the stage made its folder
    return card


def check_held_card(folder, card: dict, key: str, here: str = "here",
                    allowed: str = "the card it was started with") -> None:
    """One line (Tr2Error, naming `key`) where the card a results folder was started with (its card.yaml) differs
    from `card`: the first top-level key that differs, its value there and `here`."""
    path = Path(folder) / "card.yaml"
    held = validate_card(yaml.safe_load(path.read_text())) if path.is_file() else card
    if held != card:
        k = next(k for k in card if held.get(k) != card.get(k))
        raise Tr2Error(f"{key}: {str(folder)!r} holds another card (key {k!r} differs: {held.get(k)!r} there, "
                       f"{card.get(k)!r} {here}); allowed: {allowed}")


def dump_card(card: dict) -> str:
    return yaml.safe_dump(card, sort_keys=False)
