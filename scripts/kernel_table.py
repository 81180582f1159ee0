"""Kernel time a step by family (params/families.tsv), both sides side by side, from tr2.profile_run's profile.json
files named MODEL-DTYPE-SIDE.json in one folder (scripts/kernel_table_call.sh writes them); attention's kernels
listed by name. Writes the table as CSV beside the folder (DIR/../kernel_table.csv) and prints it.

    python3 scripts/kernel_table.py DIR
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from tr2.families import family_of, group, load_rules


def load(folder: Path) -> dict:
    """{(model, dtype): {side: profile}} of the profiles that finished."""
    out: dict = {}
    for f in sorted(folder.glob("*.json")):
        model, dtype, side = f.stem.rsplit("-", 2)
        prof = json.loads(f.read_text())
        if prof.get("status") == "ok" and prof.get("steps_in_window"):
            out.setdefault((model, dtype), {})[side] = prof
    return out


def rows(profiles: dict, rules) -> list[dict]:
    table = []
    for (model, dtype), sides in profiles.items():
        grouped = {side: group(p["kernels"], rules, p["steps_in_window"]) for side, p in sides.items()}
        families = sorted({f for g in grouped.values() for f in g}, key=lambda f: -max(
            g.get(f, {}).get("us_per_step", 0.0) for g in grouped.values()))
        for fam in families + ["(all)"]:
            row = {"model": model, "dtype": dtype, "family": fam}
            for side, g in grouped.items():
                if fam == "(all)":
                    row[f"{side}_us"] = sum(v["us_per_step"] for v in g.values())
                    row[f"{side}_launches"] = sum(v["launches_per_step"] for v in g.values())
                else:
                    row[f"{side}_us"] = g.get(fam, {}).get("us_per_step", 0.0)
                    row[f"{side}_launches"] = g.get(fam, {}).get("launches_per_step", 0.0)
            table.append(row)
    return table


def main(folder: str) -> None:
    d = Path(folder)
    rules = load_rules()
    profiles = load(d)
    table = rows(profiles, rules)
    if not table:
        print(f"no finished profile in {d}")
        return
    fields = list(dict.fromkeys(k for r in table for k in r))
    with open(d.parent / "kernel_table.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(table)
    print(f"{'model':12} {'family':22} {'cupy us/step':>12} {'torch us/step':>13} {'cupy/torch':>10}")
    for r in table:
        c, t = r.get("cupy_us", 0.0), r.get("torch_us", 0.0)
        print(f"{r['model']:12} {r['family']:22} {c:12.1f} {t:13.1f} {(c / t if t else float('nan')):10.3f}")
    for (model, dtype), sides in profiles.items():
        for side, p in sides.items():
            att = [k for k in p["kernels"] if family_of(k["name"], rules) == "attention"]
            for k in sorted(att, key=lambda k: -k["total_us"]):
                print(f"  {model} {side} attention: {k['total_us'] / p['steps_in_window']:8.1f} us/step "
                      f"{k['launches'] / p['steps_in_window']:5.1f} launches  {k['name'][:110]}")


if __name__ == "__main__":
    main(sys.argv[1])
