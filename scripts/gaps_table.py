"""A profile.json's idle time between kernels (tr2.profile_run.kernel_gaps), a step, as a short table.

    python3 scripts/gaps_table.py PROFILE.json [PROFILE.json ...] [--top N]

Per file: kernels, span, busy and idle time a step (µs; the window's steps from the file), then the top N kernel
pairs around the waits (idle µs a step, gaps a step, the longest). A file without the record says so.
"""
from __future__ import annotations

import argparse
import json
import sys


def table(profile: dict, top: int) -> list[str]:
    gaps, steps = profile.get("gaps"), profile.get("steps_in_window")
    if not gaps or not steps:
        return ["  no idle-time record (a CPU profile, or one made before profile_run kept it)"]
    out = [f"  kernels {gaps['kernels'] / steps:.1f} a step; span {gaps['span_us'] / steps:.1f} us, busy "
           f"{gaps['busy_us'] / steps:.1f}, idle {gaps['idle_us'] / steps:.1f} a step"]
    for p in gaps["pairs"][:top]:
        out.append(f"  {p['total_us'] / steps:8.2f} us {p['count'] / steps:5.2f}x max {p['max_us']:7.2f}  "
                   f"{p['before'][:60]} -> {p['after'][:60]}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("profiles", nargs="+")
    ap.add_argument("--top", type=int, default=10)
    ns = ap.parse_args(argv)
    rc = 0
    for path in ns.profiles:
        try:
            with open(path) as fh:
                profile = json.load(fh)
        except (OSError, ValueError) as e:
            print(f"{path}: not read ({e})", file=sys.stderr)
            rc = 2
            continue
        print(f"{path}: {profile.get('side')} {profile.get('model')} {profile.get('dtype')} {profile.get('mode') or ''}")
        print("\n".join(table(profile, ns.top)))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
