"""What a device call of these cards needs from the carry (scripts/carry_prepare.sh), checked on the CPU machine before
any device time is spent: for every cuda card, a products record for the GPU its `machine` names in .cache/products
(the stages refuse to run without it where TR2_REQUIRE_PRODUCTS=1, as scripts/edition_call.sh sets, but only after a
machine has started); the cubins of this tree's kernel sources in .cache/kernels.tar.xz; nanoGPT in .cache/nanoGPT;
and the data files of the cards' models in data/, with their md5. One line a check; exit 1 where one fails, naming
what is missing and how to make it. Why: the sixty-seventh session found its carry without the H200's record after
five device tries had been made with it (none got a machine).

    PYTHONPATH=lib python3 scripts/carry_check.py CARD [CARD ...]     (run from the repository root)
"""
from __future__ import annotations

import hashlib
import re
import sys
import tarfile
from pathlib import Path

from tr2.cards import load_card, load_model
from tr2.cupy_side.gpu.cubins import path_for
from tr2.cupy_side.products import slug
from tr2.data import DATA_FILES, MD5

PREPARE = "RECORD=<a results folder holding the record> bash scripts/carry_prepare.sh"


def products_problem(machine: str, folder: Path) -> str | None:
    """None where folder holds a record of the GPU `machine` names (any model suffix and cuBLASLt version: the
    device's GPU name decides which one a run reads, e.g. 'NVIDIA H200' -> nvidia-h200-cublaslt<version>.json)."""
    name = re.compile(re.escape(slug(machine)) + r"(-[a-z0-9-]+)?-cublaslt[0-9]+\.json")
    have = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    if any(name.fullmatch(n) for n in have):
        return None
    return (f"no products record for machine {machine!r} ({slug(machine)}-cublaslt<version>.json) in {folder} "
            f"(it holds: {', '.join(have) or 'nothing'}); make the carry with {PREPARE}")


def kernels_problem(kernels_dir: Path, archive: Path) -> str | None:
    """None where the archive holds the cubin of every kernel source in kernels_dir (the names cubins.py gives them:
    the source's hash and the compile options)."""
    if not archive.is_file():
        return f"no {archive}; make the carry with {PREPARE}"
    with tarfile.open(archive) as t:
        have = {Path(n).name for n in t.getnames()}
    missing = sorted({path_for(f.name, "sm_90").name for f in kernels_dir.glob("*.cu")} - have)
    if missing:
        return (f"{archive} lacks the cubins of this tree's sources: {', '.join(missing)} (a kernel changed since the "
                f"carry was made); make it again with {PREPARE}")
    return None


def data_problem(names: list[str], folder: Path) -> str | None:
    for name in names:
        p = folder / name
        if not p.is_file():
            return f"no {p}; make the carry with {PREPARE} (it copies ../shared/data/shakespeare)"
        got = hashlib.md5(p.read_bytes()).hexdigest()
        if got != MD5[name]:
            return f"{p}: md5 {got}, expected {MD5[name]}; make the carry again with {PREPARE}"
    return None


def problems(cards: list[str], root: Path) -> list[tuple[str, str | None]]:
    """(what was checked, None or the problem) for each check the cards ask for."""
    out = []
    data_names: list[str] = []
    machines = []
    for name in cards:
        card = load_card(name)
        if card["device"] == "cuda" and card.get("machine") not in machines:
            machines.append(card["machine"])
        for m in card["models"]:
            data_names += [n for n in DATA_FILES[load_model(m).dataset] if n not in data_names]
    for machine in machines:
        out.append((f"products record for {machine}", products_problem(machine, root / ".cache" / "products")))
    if machines:
        out.append(("cubins of this tree's kernels", kernels_problem(root / "lib" / "tr2" / "cupy_side" / "kernels",
                                                                    root / ".cache" / "kernels.tar.xz")))
        nanogpt = root / ".cache" / "nanoGPT" / "train.py"
        out.append(("nanoGPT", None if nanogpt.is_file() else f"no {nanogpt}; make the carry with {PREPARE}"))
    out.append((f"data ({', '.join(data_names)})", data_problem(data_names, root / "data")))
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: PYTHONPATH=lib python3 scripts/carry_check.py CARD [CARD ...]", file=sys.stderr)
        return 2
    found = problems(argv, Path.cwd())
    for what, problem in found:
        print(f"carry_check: {what}: {problem or 'ok'}", file=sys.stderr if problem else sys.stdout)
    return 1 if any(p for _, p in found) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
