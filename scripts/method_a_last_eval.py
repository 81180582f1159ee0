"""Method A's last evaluation, seed by seed, pooled over folders: does one side end lower on the training split and
higher on the validation split than the other (more overfit), beyond what seed noise gives?

For each split it prints every run's loss, the medians, how many of the cupy × torch pairs have cupy lower, and the
exact two-sided permutation p-value of the difference of means (every way of splitting the pooled runs into groups of
the two sides' sizes). A diagnostic, not a protocol rule: method A's verdict is the stage's own.

    python scripts/method_a_last_eval.py MODEL DTYPE FOLDER [FOLDER ...]
"""
import itertools
import json
import statistics
import sys
from pathlib import Path


def last_evals(folder: Path, model: str, dtype: str) -> dict:
    """{(side, seed): eval record at the run's last evaluation} for the finished runs of one configuration."""
    out = {}
    for f in sorted((folder / "runs").glob(f"{model}_{dtype}_*.metrics.jsonl")):
        side, seed = f.name.split(".")[0].split("_")[-2:]
        evals = [r for r in map(json.loads, f.read_text().splitlines()) if r.get("kind") == "eval"]
        if evals:
            out[(side, f"{folder.name[:24]}/{seed}")] = evals[-1]
    return out


def permutation_p(a: list, b: list) -> float:
    """Exact two-sided p-value of |mean(a) - mean(b)| over every relabelling of the pooled values."""
    pooled, n = a + b, len(a)
    observed = abs(statistics.fmean(a) - statistics.fmean(b))
    total = sum(pooled)
    hits = count = 0
    for idx in itertools.combinations(range(len(pooled)), n):
        s = sum(pooled[i] for i in idx)
        d = abs(s / n - (total - s) / (len(pooled) - n))
        hits += d >= observed - 1e-12
        count += 1
    return hits / count


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    model, dtype, folders = argv[0], argv[1], [Path(f) for f in argv[2:]]
    runs = {}
    for folder in folders:
        runs.update(last_evals(folder, model, dtype))
    steps = sorted({r["step"] for r in runs.values()})
    print(f"{model} {dtype}: {len(runs)} runs from {len(folders)} folder(s), last evaluation at step(s) {steps}")
    for split in ("train", "val"):
        by = {s: sorted(r[split] for (side, _), r in runs.items() if side == s) for s in ("cupy", "torch")}
        lower = sum(c < t for c in by["cupy"] for t in by["torch"])
        print(f"\n{split}:")
        for s in ("cupy", "torch"):
            print(f"  {s:5s} n={len(by[s])} median {statistics.median(by[s]):.4f}  " + " ".join(f"{v:.4f}" for v in by[s]))
        print(f"  cupy lower in {lower} of {len(by['cupy']) * len(by['torch'])} pairs; exact permutation p "
              f"(difference of means, two-sided) {permutation_p(by['cupy'], by['torch']):.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
