"""The kernels of one tr2.profile_run profile.json, a step's time and launches by name, longest first, with the
sum: what a kernel table's family rows are made of.

    python3 scripts/kernel_list.py PROFILE.json
"""
from __future__ import annotations

import json
import sys


def rows(profile: dict) -> list[tuple[float, float, str]]:
    """(us a step, launches a step, name) of every kernel, longest first."""
    n = profile["steps_in_window"]
    return sorted(((k["total_us"] / n, k["launches"] / n, k["name"]) for k in profile["kernels"]), reverse=True)


def main(path: str) -> int:
    prof = json.loads(open(path).read())
    if prof.get("status") != "ok" or not prof.get("steps_in_window"):
        print(f"{path}: no finished profile (status {prof.get('status')!r})")
        return 1
    table = rows(prof)
    print(f"{prof.get('model')} {prof.get('dtype')} {prof.get('side')}: {sum(r[0] for r in table):.1f} us of kernels "
          f"a step, {sum(r[1] for r in table):.1f} launches")
    for us, launches, name in table:
        print(f"{us:9.1f} us/step {launches:6.1f} launches  {name[:110]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
