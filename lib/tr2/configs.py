"""One run configuration: a side in one element type of one model, its key, and its trainer arguments.

Every stage takes its configurations from `configurations(card)`, so a key means the same thing in every stage and
the report: `<model>/<dtype>/<build>`, build `torch-<mode>`, `nanogpt-<mode>` (nanoGPT's own train.py), `cupy` or
`cupy-hr` (with the half roundings). The card's `cuda_graph` is no part of the key (one card times one way).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from .trainargs import TORCH_LOOPS, TrainArgs


@dataclass(frozen=True)
class RunConfig:
    model: str
    dtype: str
    side: str                       # torch | nanogpt | cupy
    mode: Optional[str] = None      # the PyTorch sides' mode; None for cupy
    half_roundings: bool = False    # the cupy side's half roundings (half types only)
    cuda_graph: bool = False        # the cupy side's step replayed as one CUDA graph (the card's cuda_graph)
    checkout: Optional[str] = None  # the nanogpt side's nanoGPT checkout (the card's nanogpt_path)

    @property
    def build(self) -> str:
        if self.side in TORCH_LOOPS:
            return f"{self.side}-{self.mode}"
        return "cupy-hr" if self.half_roundings else "cupy"

    @property
    def key(self) -> str:
        return f"{self.model}/{self.dtype}/{self.build}"

    @property
    def slug(self) -> str:
        """The key as a file name."""
        return self.key.replace("/", "_")

    @property
    def label(self) -> str:
        if self.side in TORCH_LOOPS:
            return f"{self.side} {self.mode}"
        return "cupy" + (" half-roundings" if self.half_roundings else "") + (" graph" if self.cuda_graph else "")

    def as_record(self) -> dict:
        """The fields a stage's record carries (the key and build included)."""
        rec = asdict(self)
        if rec["checkout"] is None:  # the records of the other sides stay as they were before the nanogpt side
            del rec["checkout"]
        return {**rec, "key": self.key, "build": self.build}

    def train_args(self, device: str, steps: int, **kw) -> TrainArgs:
        """The trainer's arguments for one run of this configuration; kw: any other TrainArgs field."""
        return TrainArgs(side=self.side, model=self.model, dtype=self.dtype, mode=self.mode or "eager",
                         device=device, steps=steps, half_roundings=self.half_roundings, cuda_graph=self.cuda_graph,
                         nanogpt=self.checkout, **kw)


def compile_caches(slug: str, root) -> dict:
    """The environment that gives one configuration Inductor's and Triton's caches of its own, under root/<slug>.
    On the H200, one cache shared by all configurations served a bfloat16 reduce-overhead run what a float16 run
    had compiled before it: it started in 3 s instead of 23, ran 5% faster and trained to loss 5.52 at step 200
    where the same run with a cache of its own reached 4.07 (gpt2-small; results/h200-perf-20261201b/call6-71acdcc
    against call4-831b1d3). A configuration's own runs still share theirs (the series' discarded run fills it)."""
    return {"TORCHINDUCTOR_CACHE_DIR": str(Path(root) / slug / "inductor"),
            "TRITON_CACHE_DIR": str(Path(root) / slug / "triton")}


def cupy_builds(card: dict, dtype: str) -> list[bool]:
    """The half-roundings settings the cupy side is built with in `dtype` (float32 has one build)."""
    return [False] if dtype == "float32" else list(dict.fromkeys(bool(h) for h in card["half_roundings"]))


def compared_build(card: dict, dtype: str) -> bool:
    """The cupy build a verdict compares: with the half roundings in the half types where the card builds it."""
    return dtype != "float32" and True in cupy_builds(card, dtype)


def graphed(card: dict) -> bool:
    """Whether the cupy side runs its whole-step graph: where the card asks for it, in every element type (float16
    too since its loss scaler moved to the device, 2026-11-30; the record says so per run)."""
    return bool(card.get("cuda_graph"))


def configurations(card: dict, models=None, compared_only: bool = False, cupy_first: bool = False,
                   nanogpt: bool = False) -> list[RunConfig]:
    """Every configuration of the card in the card's order: per model and type, the torch modes, then the
    cupy builds. `models`: a subset; `compared_only`: only the cupy build the verdict compares;
    `cupy_first`: the cupy side before the torch modes; `nanogpt`: the nanogpt side's modes after the torch
    side's where the card's torch_loops lists it (the series and method B take it; the families' profiler and
    the footprint measure the torch side only, for now)."""
    out = []
    loops = [lp for lp in card.get("torch_loops", ["torch"]) if nanogpt or lp == "torch"]
    for model in models or card["models"]:
        for dtype in card["dtypes"]:
            torch = [RunConfig(model, dtype, lp, mode=m, checkout=card.get("nanogpt_path") if lp == "nanogpt" else None)
                     for lp in loops for m in card["torch_modes"]]
            hrs = [compared_build(card, dtype)] if compared_only else cupy_builds(card, dtype)
            cupy = [RunConfig(model, dtype, "cupy", half_roundings=h, cuda_graph=graphed(card)) for h in hrs]
            out += cupy + torch if cupy_first else torch + cupy
    return out
