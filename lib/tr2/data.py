"""Tiny Shakespeare by character and by GPT-2 BPE, batches as nanoGPT draws them, recorded batch orders."""
from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import REPO_ROOT, Tr2Error

# md5 sums from ../shared/data/README.md (the files nanoGPT's prepare.py writes).
MD5 = {
    "input.txt": "6fb458f1232090904fb40fe944165e91",
    "train.bin": "f6eea82ee7b1600588720fce07669c52",
    "val.bin": "61250e280189555fae15c630ea9b5c02",
}
SPLITS = ("train", "val")
DATA_FILES = {"shakespeare_char": ("input.txt",), "shakespeare": ("train.bin", "val.bin")}  # what each dataset reads


def data_dirs() -> list[Path]:
    """Where the data files are looked for, in order."""
    dirs = []
    if os.environ.get("TR2_DATA"):
        named = Path(os.environ["TR2_DATA"])
        # A misspelt $TR2_DATA must not fall through to another folder: the user named this one.
        if not named.is_dir():
            raise Tr2Error(f"TR2_DATA: {str(named)!r} is not a folder; allowed: a folder holding nanoGPT's "
                           "input.txt (and train.bin, val.bin), or TR2_DATA unset")
        return [named]
    dirs += [REPO_ROOT / "data", REPO_ROOT.parent / "shared" / "data" / "shakespeare"]
    return dirs


@lru_cache(maxsize=None)
def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def data_file(name: str) -> Path:
    """The checked path of one data file; a missing or wrong file is a clear error."""
    tried = []
    for d in data_dirs():
        p = d / name
        if p.is_file():
            got = _md5(p)
            if got != MD5[name]:
                raise Tr2Error(f"data file {p}: md5 {got} differs from the expected {MD5[name]}; "
                               f"replace it with nanoGPT's {name} (see ../shared/data/README.md)")
            return p
        tried.append(str(p))
    raise Tr2Error(f"data file {name!r} not found; put nanoGPT's {name} (md5 {MD5[name]}) in $TR2_DATA "
                   f"or {REPO_ROOT / 'data'} (looked at: {', '.join(tried)})")


@lru_cache(maxsize=None)
def char_vocab() -> tuple[str, ...]:
    text = data_file("input.txt").read_text(encoding="utf-8")
    return tuple(sorted(set(text)))


@lru_cache(maxsize=None)
def load_split(dataset: str, split: str) -> np.ndarray:
    """Token ids of one split as uint16, exactly what nanoGPT's prepare.py writes."""
    if split not in SPLITS:
        raise Tr2Error(f"split: {split!r}; allowed: {', '.join(SPLITS)}")
    if dataset == "shakespeare_char":
        text = data_file("input.txt").read_text(encoding="utf-8")
        stoi = {ch: i for i, ch in enumerate(char_vocab())}
        n = len(text)
        part = text[: int(n * 0.9)] if split == "train" else text[int(n * 0.9):]
        return np.array([stoi[c] for c in part], dtype=np.uint16)
    if dataset == "shakespeare":
        return np.fromfile(data_file(f"{split}.bin"), dtype=np.uint16)
    raise Tr2Error(f"dataset: {dataset!r}; allowed: shakespeare_char, shakespeare")


def random_offsets(gen: np.random.Generator, n_tokens: int, block_size: int, batch_size: int) -> np.ndarray:
    """nanoGPT's `torch.randint(len(data) - block_size, (batch_size,))`, drawn from a numpy generator."""
    return gen.integers(0, n_tokens - block_size, size=batch_size, dtype=np.int64)


def make_batch(data: np.ndarray, offsets: np.ndarray, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.asarray(offsets, dtype=np.int64)[:, None] + np.arange(block_size + 1, dtype=np.int64)[None, :]
    window = data[idx].astype(np.int64)
    # Contiguous copies: callers hand these to frameworks that need flat memory (torch's .view).
    return np.ascontiguousarray(window[:, :-1]), np.ascontiguousarray(window[:, 1:])


def write_batch_order(path, dataset: str, block_size: int, batch_size: int, steps: int, seed: int) -> Path:
    """Record the training offsets of iterations 0..steps, once, for both sides to read."""
    path = Path(path)
    n_tokens = len(load_split(dataset, "train"))
    gen = np.random.default_rng(seed)
    offsets = np.stack([random_offsets(gen, n_tokens, block_size, batch_size) for _ in range(steps + 1)])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, offsets)
    os.replace(tmp, path)
    meta = {"dataset": dataset, "block_size": block_size, "batch_size": batch_size, "steps": steps, "seed": seed}
    Path(str(path) + ".json").write_text(json.dumps(meta, indent=1) + "\n")
    return path


def read_batch_order(path, mmap: bool = False) -> tuple[np.ndarray, dict]:
    """A recorded order and its sidecar; a missing, corrupt or ill-formed file is one line."""
    given, path = str(path), Path(path)   # as given: '' would show as '.'
    if not path.is_file():
        said = "is empty" if not given else "is a folder" if path.is_dir() else "does not exist"
        raise Tr2Error(f"--batches: {given!r} {said}; allowed: an .npy written by tr2.data.write_batch_order")
    try:
        offsets = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError):
        # numpy's own words (e.g. about pickled data) would mislead: the file is simply not an offsets array
        raise Tr2Error(f"--batches: {path} is not an .npy array numpy can read; allowed: an .npy written by "
                       "tr2.data.write_batch_order") from None
    meta_path = Path(str(path) + ".json")
    try:
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    except (ValueError, OSError):
        raise Tr2Error(f"--batches: its sidecar {meta_path} is not JSON; allowed: the one write_batch_order wrote") from None
    if not isinstance(meta, dict):
        raise Tr2Error(f"--batches: its sidecar {meta_path} holds no mapping; allowed: the one write_batch_order wrote")
    if offsets.ndim != 2 or offsets.dtype.kind != "i":
        raise Tr2Error(f"--batches: {path} holds {offsets.dtype} {offsets.shape}; expected int offsets [steps+1, batch]")
    return offsets, meta


def check_batch_order(path, dataset: str, block_size: int, batch_size: int, steps: int) -> None:
    """Before any work: the recorded order fits the run (its data, shapes, and iterations 0..steps)."""
    order, meta = read_batch_order(path, mmap=True)
    want = {"dataset": dataset, "block_size": block_size, "batch_size": batch_size}
    for k, v in want.items():
        if k in meta and meta[k] != v:
            raise Tr2Error(f"--batches: {path} was recorded with {k}={meta[k]!r}, this run needs {v!r}")
    if order.shape[1] != batch_size:
        raise Tr2Error(f"--batches: {path} has batch {order.shape[1]}, this run needs {batch_size}")
    if len(order) < steps + 1:
        raise Tr2Error(f"--batches: {path} holds {len(order)} iterations; allowed: at least steps + 1 = {steps + 1}")


class BatchSource:
    """The batches of one run: from a recorded order when given, else drawn like nanoGPT from a seeded generator."""

    def __init__(self, dataset: str, block_size: int, batch_size: int, seed: int, order_path=None):
        self.block_size, self.batch_size = block_size, batch_size
        self.train = load_split(dataset, "train")
        self.val = load_split(dataset, "val")
        self.gen = np.random.default_rng(seed)
        self.order = None
        if order_path is not None:
            self.order, meta = read_batch_order(order_path)
            want = {"dataset": dataset, "block_size": block_size, "batch_size": batch_size}
            for k, v in want.items():
                if k in meta and meta[k] != v:
                    raise Tr2Error(f"--batches: {order_path} was recorded with {k}={meta[k]!r}, this run needs {v!r}")
            if self.order.shape[1] != batch_size:
                raise Tr2Error(f"--batches: {order_path} has batch {self.order.shape[1]}, this run needs {batch_size}")

    def train_batch(self, step: int):
        if self.order is not None:
            if step >= len(self.order):
                raise Tr2Error(f"--batches: the order holds {len(self.order)} iterations, step {step} asked for more")
            offsets = self.order[step]
        else:
            offsets = random_offsets(self.gen, len(self.train), self.block_size, self.batch_size)
        return make_batch(self.train, offsets, self.block_size)

    def eval_batch(self, split: str):
        data = self.train if split == "train" else self.val
        return make_batch(data, random_offsets(self.gen, len(data), self.block_size, self.batch_size), self.block_size)
