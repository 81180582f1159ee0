"""Retire, in a stage's folder, every configuration an identity check found changed (tr2.retire.differing: a run key
that differs from its record retires all seeds of its configuration), with the check named in each reason.

    python scripts/retire_differing.py FOLDER IDENTITY.jsonl [--stage method_a] [--dry-run]

Prints one line a configuration (retired, or with --dry-run what would be); nothing when the check found every run
identical. Exit 0 after retiring (or nothing to retire), 2 for bad input or a check that cannot decide (one line,
nothing moved). Why: the edition's method A refresh (scripts/method_a_refresh.sh) checks, retires and reruns in one
device call, so the decision must not need a person between the check and the retirement.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from tr2 import Tr2Error  # noqa: E402
from tr2.results import read_jsonl  # noqa: E402
from tr2.retire import differing, retire  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/retire_differing.py", description=__doc__.split("\n")[0])
    p.add_argument("folder", metavar="FOLDER")
    p.add_argument("identity", metavar="IDENTITY.jsonl", help="scripts/identity_check.py's output for FOLDER")
    p.add_argument("--stage", default="method_a")
    p.add_argument("--dry-run", action="store_true", help="say what would be retired, move nothing")
    a = p.parse_args(argv)
    try:
        path = Path(a.identity)
        if not path.is_file():
            raise Tr2Error(f"IDENTITY: {a.identity!r} is not a file; allowed: scripts/identity_check.py's --out file")
        checks = read_jsonl(path)
        if not checks:
            raise Tr2Error(f"IDENTITY: {a.identity!r} holds no line; allowed: a check that ran at least one run")
        todo = differing(checks, source=f"the identity check {path.name}")
        for pattern, reason in todo:
            if a.dry_run:
                print(f"would retire {pattern}: {reason}")
                continue
            done = retire(a.stage, Path(a.folder), [pattern], reason)
            print(f"retired {pattern}: {done['records']} record(s), {len(done['moves'])} file(s) moved; {reason}")
    except Tr2Error as e:
        sys.stderr.write(f"retire_differing: error: {e}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
