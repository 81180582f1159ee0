"""docs/architecture.md's table of kernel switches against the code: every `kernel_switch("TR2_...", default,
allowed)` call under lib/tr2/cupy_side/ is a row with that default and those allowed values, and no row names a
switch the code no longer reads (the list had drifted: two defaults and three allowed sets wrong, eight switches
missing, found in the forty-fourth session). Read from the sources, so no GPU or CuPy is needed."""
from __future__ import annotations

import ast
import re

from tr2 import REPO_ROOT

DOC = REPO_ROOT / "docs" / "architecture.md"
_ROW = re.compile(r"^\| `(TR2_[A-Z0-9_]+)` \| `([^`]+)` \| ([^|]+) \|")


def code_switches() -> dict:
    """name -> (default, allowed, file) of every kernel_switch call in the cupy side's modules, read as literals; the
    allowed values default to (0, 1) as kernel_switch's do."""
    out = {}
    for path in sorted((REPO_ROOT / "lib" / "tr2" / "cupy_side").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            func = getattr(node, "func", None)
            if not (isinstance(node, ast.Call) and getattr(func, "id", getattr(func, "attr", None)) == "kernel_switch"):
                continue
            if not (node.args and isinstance(node.args[0], ast.Constant)):
                continue
            default = ast.literal_eval(node.args[1])
            allowed = ast.literal_eval(node.args[2]) if len(node.args) > 2 else (0, 1)
            out[node.args[0].value] = (default, tuple(allowed), path.name)
    return out


def allowed_text(allowed: tuple) -> str:
    """The allowed values as the table writes them: listed in the code's order."""
    return ", ".join(map(str, allowed))


def doc_rows() -> dict:
    rows = {}
    for line in DOC.read_text().splitlines():
        m = _ROW.match(line)
        if m:
            assert m.group(1) not in rows, f"{m.group(1)} has two rows"
            rows[m.group(1)] = (m.group(2), m.group(3).strip())
    return rows


def test_the_code_reads_switches():
    switches = code_switches()
    assert len(switches) >= 10 and "TR2_GELU_REVERSE" in switches, switches


def test_every_switch_has_its_row_with_its_default_and_allowed_values():
    code, doc = code_switches(), doc_rows()
    assert sorted(code) == sorted(doc), {"not in the doc": sorted(set(code) - set(doc)),
                                         "in the doc, not in the code": sorted(set(doc) - set(code))}
    wrong = {name: {"doc": doc[name], "code": (str(d), allowed_text(a))}
             for name, (d, a, _file) in code.items() if doc[name] != (str(d), allowed_text(a))}
    assert not wrong, wrong
