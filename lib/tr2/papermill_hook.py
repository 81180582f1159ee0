"""One line, exit 2, for a stage refused by its parameters check under the `papermill` command.

papermill re-raises a notebook's exception as PapermillExecutionError and its CLI leaves it uncaught: a page of
papermill's frames with our one-line Tr2Error buried inside. `make setup` installs a .pth file (`python -m
tr2.papermill_hook install`) that puts `hook` in sys.excepthook of every Python of the venv. Under `papermill` it
reports two failures in one line, exit 2: a notebook cell raised Tr2Error (the card check), or papermill failed
reading a -f card (a list or a scalar card, binary junk, bad YAML: tr2.cards reads the file and says why).
Everything else reaches the hook that was there before. papermill has written the executed notebook, the error in
it; no results folder exists yet (the check runs first).
"""
from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

PTH_NAME = "tr2-papermill-hook.pth"
PTH_LINE = 'import sys; exec("try:\\n import tr2.papermill_hook as _h; _h.install()\\nexcept ImportError:\\n pass")\n'
_previous = None


def card_files(argv) -> list[str]:
    """The card files (-f, --parameters_file) of a papermill command line, as given."""
    out = []
    for i, a in enumerate(argv):
        if a in ("-f", "--parameters_file") and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif a.startswith("--parameters_file="):
            out.append(a.split("=", 1)[1])
    return out


def one_line(exc) -> str | None:
    """The one line for an exception of a papermill process, or None (not ours to report)."""
    if type(exc).__name__ == "PapermillExecutionError" and getattr(exc, "ename", None) == "Tr2Error":
        return " ".join(str(exc.evalue).split())
    if isinstance(exc, (ValueError, TypeError, UnicodeDecodeError)) or type(exc).__module__.startswith("yaml"):
        # imported only here: the .pth file loads this module in every Python of the venv, papermill's or not
        from . import Tr2Error
        from .cards import read_card_file
        for f in card_files(sys.argv[1:]):
            try:
                read_card_file(f)
            except Tr2Error as e:
                return str(e)
    return None


def hook(exc_type, exc, tb):
    try:
        line = one_line(exc) if sys.argv and Path(sys.argv[0]).name == "papermill" else None
    except Exception:  # the hook must never hide the original error behind its own
        line = None
    if line is None:
        return (_previous or sys.__excepthook__)(exc_type, exc, tb)
    sys.stdout.flush()
    sys.stderr.write(f"papermill: error: {line}\n")
    sys.stderr.flush()
    os._exit(2)  # an excepthook cannot set the exit code otherwise; everything is flushed and written


def install() -> None:
    global _previous
    if sys.excepthook is not hook:
        _previous, sys.excepthook = sys.excepthook, hook


def main(argv=None) -> int:
    """`python -m tr2.papermill_hook install [--dir DIR]`: write the .pth file into DIR (default: this
    Python's site-packages)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "install":
        sys.stderr.write("usage: python -m tr2.papermill_hook install [--dir DIR]\n")
        return 2
    target = Path(argv[argv.index("--dir") + 1]) if "--dir" in argv else Path(sysconfig.get_paths()["purelib"])
    (target / PTH_NAME).write_text(PTH_LINE)
    print(target / PTH_NAME)
    return 0


if __name__ == "__main__":
    sys.exit(main())
