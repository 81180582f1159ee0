"""The GELU product probe's timings across the calls of a results folder, as one table and one plot.

Each call's `gelu_product.jsonl` (and `dgelu.jsonl`, the DGELU forms run in a process apart) holds, per model, the
median ms of every form timed in that call, cuBLAS's product and our GELU kernels among them. A form's ratio is taken
against what it would replace in the same call (gelu_product_probe.py's rule): a plain product against cuBLAS's
product of its layout, a GELU or DGELU product against cuBLAS's product plus our GELU kernel. Calls land on different
machines, so only ratios within one call are compared; the plot shows each call's ratio as a dot.

    python scripts/probes/gelu_product_summary.py results/h200-perf-20261203i
writes gelu_product_forms.csv and gelu_product_forms.png into the folder.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gelu_product_probe as gpp  # noqa: E402  (the kernels' table: epilogue and layout of each form)

WITHOUT_STORES = " w/o stores"


def kernel_of(form: str) -> str:
    """The kernel a timed form ran: its name, less the probe's " w/o stores" of a second timing."""
    return form[:-len(WITHOUT_STORES)] if form.endswith(WITHOUT_STORES) else form


def reference(form: str) -> tuple[str, ...] | None:
    """The forms of the same call whose summed time `form` replaces; None for cuBLAS's and our kernels' own rows."""
    name = kernel_of(form)
    if name not in gpp.KERNELS:
        return None
    epilogue, mn = gpp.KERNELS[name][0], gpp.KERNELS[name][1]
    side = "bwd" if mn else "fwd"
    if epilogue == "plain":
        return (f"{side} product",)
    return (f"{side} product", f"{side} gelu kernel")


def ratios(records: list[dict], call: str) -> list[dict]:
    """One row a (model, form) timed in this call: ms, what it replaces (ms) and the ratio."""
    timed = {}
    for r in records:
        if "form" in r and r.get("ms") is not None:
            timed[(r["model"], r["form"])] = r["ms"]
    rows = []
    for (model, form), ms in timed.items():
        ref = reference(form)
        if ref is None or any((model, f) not in timed for f in ref):
            continue
        against = sum(timed[(model, f)] for f in ref)
        name = kernel_of(form)
        rows.append({"call": call, "model": model, "form": form, "epilogue": gpp.KERNELS[name][0],
                     "form_id": gpp.KERNELS[name][4], "ms": ms, "against": " + ".join(ref), "against_ms": against,
                     "ratio": ms / against})
    return rows


def read_folder(folder: Path) -> list[dict]:
    rows = []
    for call in sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith("call")):
        for name in ("gelu_product.jsonl", "dgelu.jsonl"):
            path = call / name
            if path.exists():
                records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
                rows += ratios(records, f"{call.name}/{name.split('.')[0]}")
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted({r["model"] for r in rows})
    forms = sorted({r["form"] for r in rows}, key=lambda f: (reference(f), f))
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 0.28 * len(forms) + 1.5), sharey=True,
                             squeeze=False)
    for ax, model in zip(axes[0], models):
        for y, form in enumerate(forms):
            xs = [r["ratio"] for r in rows if r["model"] == model and r["form"] == form]
            ax.plot(xs, [y] * len(xs), "o", ms=4, color="tab:blue" if "gelu" not in form else "tab:red")
        ax.axvline(1.0, color="grey", lw=0.8)
        ax.set_title(model)
    axes[0][0].set_yticks(range(len(forms)))
    axes[0][0].set_yticklabels(forms, fontsize=7)
    fig.supxlabel("time / what it replaces in the same call: plain (blue) / cuBLAS's product, GELU and DGELU (red) / "
                  "cuBLAS's product + our GELU kernel; a dot a call")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    folder = Path(argv[1])
    rows = read_folder(folder)
    if not rows:
        print(f"{folder}: no call*/gelu_product.jsonl with timings")
        return 1
    import pandas as pd
    table = pd.DataFrame(rows)
    table.to_csv(folder / "gelu_product_forms.csv", index=False)
    plot(rows, folder / "gelu_product_forms.png")
    summary = table.groupby(["model", "form"])["ratio"].agg(["median", "min", "max", "count"]).round(3)
    print(summary.to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
