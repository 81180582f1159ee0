"""Two tr2.profile_run profiles side by side by kernel family (params/families.tsv, the families stage's rules), µs a
step: what the families stage's table shows, for profiles taken outside a stage (a device call's ad-hoc runs).

    PYTHONPATH=lib python3 scripts/family_compare.py A.json B.json [OUT.csv]

Prints one row a family (A, B, A - B), longest first, and the sums; with OUT.csv the same as CSV.
"""
from __future__ import annotations

import csv
import json
import sys

from tr2.families import group, load_rules


def per_family(profile: dict, rules) -> dict:
    """{family: µs a step} of one finished profile (status ok, steps_in_window > 0); else a ValueError naming it."""
    if profile.get("status") != "ok" or not profile.get("steps_in_window"):
        raise ValueError(f"not a finished profile: status {profile.get('status')!r}, "
                         f"steps_in_window {profile.get('steps_in_window')!r}")
    return {f: g["us_per_step"] for f, g in group(profile["kernels"], rules, profile["steps_in_window"]).items()}


def compare(a: dict, b: dict) -> list[tuple[str, float, float, float]]:
    """(family, a, b, a - b) for every family of either, by a + b descending, then the sum row."""
    fams = sorted(set(a) | set(b), key=lambda f: -(a.get(f, 0.0) + b.get(f, 0.0)))
    rows = [(f, a.get(f, 0.0), b.get(f, 0.0), a.get(f, 0.0) - b.get(f, 0.0)) for f in fams]
    sa, sb = sum(a.values()), sum(b.values())
    return rows + [("all kernels", sa, sb, sa - sb)]


def label(p: dict) -> str:
    return f"{p.get('side')}{'-' + p['mode'] if p.get('mode') else ''}"


def main(argv) -> int:
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-3])
        return 2
    pa, pb = (json.loads(open(p).read()) for p in argv[:2])
    rules = load_rules()
    rows = compare(per_family(pa, rules), per_family(pb, rules))
    la, lb = label(pa), label(pb)
    print(f"{pa.get('model')} {pa.get('dtype')}: µs a step by family, {la} against {lb}")
    print(f"{'family':24} {la:>12} {lb:>12} {'difference':>12}")
    for f, x, y, d in rows:
        print(f"{f:24} {x:12.1f} {y:12.1f} {d:+12.1f}")
    if len(argv) == 3:
        with open(argv[2], "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["family", la, lb, "difference"])
            w.writerows([(f, round(x, 1), round(y, 1), round(d, 1)) for f, x, y, d in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
