"""python -m tr2.runner STAGE --card CARD [--resume DIR]: run one protocol stage's notebook on a card.

Checks the card first (a bad card: one line, exit 2), makes the results folder (or reuses DIR), writes
card.yaml and machine.json there, then executes the stage's notebook with papermill:

    papermill notebooks/STAGE.ipynb DIR/STAGE.ipynb -f CARD -p results_dir DIR -k python3 --log-output

from the repository root, and prints the folder. `--resume DIR` continues a stage in the folder it
started (every stage is resumable).

python -m tr2.runner latest STAGE --card NAME prints the newest results folder of that stage and card.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import yaml

from . import REPO_ROOT, RESULTS_DIR, Tr2Error
from .cards import dump_card, held_card_difference, load_card
from .results import STAMP_RE as _STAMP, new_results_dir, write_json_atomic, write_text_atomic
from .stage import STAGES


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"tr2.runner: error: {message}\n")
        sys.exit(2)


def papermill_command(stage: str, card_path, results_dir) -> list[str]:
    d = Path(results_dir)
    return [sys.executable, "-m", "papermill", str(REPO_ROOT / "notebooks" / f"{stage}.ipynb"),
            str(d / f"{stage}.ipynb"), "-f", str(card_path), "-p", "results_dir", str(d),
            "-k", "python3", "--log-output"]


def prepare(stage: str, card_path, resume=None, root=None) -> tuple[dict, Path]:
    """Check the stage and the card, make or check the folder, write card.yaml and machine.json."""
    if stage not in STAGES:
        raise Tr2Error(f"stage: {stage!r} is not allowed; allowed: {' | '.join(STAGES)}")
    card = load_card(card_path)
    if not (REPO_ROOT / "notebooks" / f"{stage}.ipynb").is_file():
        raise Tr2Error(f"stage: {stage!r} has no notebook notebooks/{stage}.ipynb yet")
    if resume:
        d = Path(resume).resolve()
        if not d.is_dir():
            raise Tr2Error(f"--resume: {str(resume)!r} is not a folder; allowed: a results folder the stage started")
        other = next((s for s in STAGES if s != stage and d.name.startswith(s + "-") and _STAMP.match(d.name[len(s) + 1:])), None)
        if other is not None:
            raise Tr2Error(f"--resume: {str(d)!r} is a folder of stage {other}; allowed: a folder of stage {stage}")
        differs = held_card_difference(d, card)
        if differs:
            key, there, here = differs
            raise Tr2Error(f"--resume: {str(d)!r} holds another card (key {key!r}: {there!r} there, "
                           f"{here!r} in {card_path}); allowed: the card it was started with")
        (d / "logs").mkdir(exist_ok=True)
    else:
        d = new_results_dir(stage, card["card"], root=root).resolve()
    if not (d / "card.yaml").is_file():
        write_text_atomic(d / "card.yaml", dump_card(card))
    if not (d / "machine.json").is_file():
        from .sysinfo import machine_info
        write_json_atomic(d / "machine.json", machine_info())
    return card, d


def folders(stage: str, card_name: str, root=None) -> list[Path]:
    """The results folders of a stage and card, oldest first."""
    root = Path(root) if root else RESULTS_DIR
    found = []
    if not root.is_dir():
        return found
    for p in root.iterdir():
        if not p.is_dir() or not p.name.startswith(stage + "-"):
            continue
        m = _STAMP.match(p.name[len(stage) + 1:])
        if not m:
            continue
        name = None
        if (p / "card.yaml").is_file():
            try:
                name = (yaml.safe_load((p / "card.yaml").read_text()) or {}).get("card")
            except yaml.YAMLError:
                name = None
        if name is None:
            tail = p.name[len(stage) + 1 + 16:]
            name = re.sub(r"-\d+$", "", tail) if tail != card_name else tail
        if name == card_name:
            found.append((m.group(1), int(m.group(3) or 1), p))
    return [p for _s, _n, p in sorted(found)]


def latest(stage: str, card_name: str, root=None, finished: bool = False):
    """The newest results folder of stage and card (with `finished`: the newest holding summary.json and the
    executed notebook), or None."""
    for p in reversed(folders(stage, card_name, root)):
        if not finished or ((p / "summary.json").is_file() and (p / f"{stage}.ipynb").is_file()):
            return p
    return None


def _card_name(arg: str) -> str:
    p = Path(arg)
    if p.suffix in (".yaml", ".yml") or p.is_file():
        return load_card(p)["card"]
    return arg


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "latest":
            p = _Parser(prog="python -m tr2.runner latest", description="Print the newest results folder of a stage and card.")
            p.add_argument("stage", help=" | ".join(STAGES))
            p.add_argument("--card", required=True, help="the card's name (or its file)")
            p.add_argument("--finished", action="store_true", help="only folders holding summary.json and the executed notebook")
            p.add_argument("--root", default=None, help=argparse.SUPPRESS)
            a = p.parse_args(argv[1:])
            if a.stage not in STAGES:
                raise Tr2Error(f"stage: {a.stage!r} is not allowed; allowed: {' | '.join(STAGES)}")
            name = _card_name(a.card)
            found = latest(a.stage, name, a.root, a.finished)
            if found is None:
                sys.stderr.write(f"tr2.runner: no results folder of stage {a.stage} and card {name} "
                                 f"under {a.root or RESULTS_DIR}\n")
                return 1
            print(found)
            return 0
        p = _Parser(prog="python -m tr2.runner", description="Run one protocol stage's notebook with papermill on a card.")
        p.add_argument("stage", help=" | ".join(STAGES) + "  (or: latest STAGE --card NAME)")
        p.add_argument("--card", required=True, help="a card file, e.g. params/cards/cpu.yaml")
        p.add_argument("--resume", default=None, metavar="DIR", help="continue the stage in this results folder")
        p.add_argument("--root", default=None, help=argparse.SUPPRESS)
        a = p.parse_args(argv)
        card, d = prepare(a.stage, a.card, a.resume, a.root)
    except Tr2Error as e:
        sys.stderr.write(f"tr2.runner: error: {e}\n")
        return 2
    print(d, flush=True)
    card_file = Path(a.card)
    card_file = card_file if card_file.is_file() else d / "card.yaml"
    cmd = papermill_command(a.stage, card_file.resolve(), d)
    rc = subprocess.call(cmd, cwd=REPO_ROOT)
    if rc != 0:
        sys.stderr.write(f"tr2.runner: papermill exited {rc}; the executed notebook is {d / (a.stage + '.ipynb')}; "
                         f"continue with --resume {d}\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
