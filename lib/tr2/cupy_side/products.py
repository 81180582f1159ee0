"""The products record: for each matrix product of a card's runs, the cuBLASLt algorithm timed fastest on the card.

gpu/lt.py takes a product's algorithm from it; a product it lacks takes cuBLASLt's heuristic choice. One JSON file
per card and cuBLASLt version under .cache/products (TR2_PRODUCTS_DIR), written atomically, read by every run and
written by none. Built ahead on the GPU machine (resumable: the record is saved after every product timed):

    python -m tr2.cupy_side.products --models nanogpt,gpt2-small,gpt2-medium --builds bf16r,f16r,tf32,f32

One eager training step of each model in each build gathers the keys of its products (gpu/lt.py product_key);
each key's candidates (cuBLASLt's list, its own first) are timed on scratch operands of the key's shapes, types and
alignments, cublasGemmEx beside them for the record, and the fastest kept with its time and configuration. They are
timed as replays of a captured graph by default (how the step runs them: a candidate that needs cuBLAS's memset
before its kernel pays the graph node's gap there), `--timing eager` as eager calls back to back.

A stage of a GPU card stops before its first run where the folder holds no record of this GPU (tr2.cards, unless
TR2_REQUIRE_PRODUCTS=0), and with TR2_REQUIRE_PRODUCTS=1 each run stops at its backend without its own. A copy kept
by a results folder (NAME-<digest>.json) goes back under the name runs look for with `--place FILE`.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path

from ..trainargs import Parser

REPO = Path(__file__).resolve().parents[3]
KEY_FIELDS = ("ta", "tb", "M", "N", "K", "a_type", "lda", "b_type", "ldb", "c_type", "ldc", "compute", "reduced",
              "align_a", "align_b", "align_c")
# build name (as gpu/attention.py's) -> dtype, tf32, half roundings
BUILDS = {"f32": ("float32", False, False), "tf32": ("float32", True, False), "bf16": ("bfloat16", True, False),
          "bf16r": ("bfloat16", True, True), "f16": ("float16", True, False), "f16r": ("float16", True, True)}


class RecordError(RuntimeError):
    pass


# ---------------------------------------------------------------------------------------------- the record (pure)
def key_text(key) -> str:
    if len(key) != len(KEY_FIELDS):
        raise ValueError(f"a product key has {len(KEY_FIELDS)} fields ({', '.join(KEY_FIELDS)}); got {len(key)}")
    return " ".join(f"{name}={int(v)}" for name, v in zip(KEY_FIELDS, key))


def parse_key(text: str) -> tuple:
    parts = dict(p.split("=", 1) for p in text.split())
    if tuple(parts) != KEY_FIELDS:
        raise ValueError(f"product key {text!r}: expected the fields {' '.join(KEY_FIELDS)} in that order")
    return tuple(int(parts[name]) for name in KEY_FIELDS)


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()


def record_dir() -> Path:
    env = os.environ.get("TR2_PRODUCTS_DIR")
    return Path(env) if env else REPO / ".cache" / "products"


def record_name(card: str, version: int) -> str:
    """The file name of a card's record for a cuBLASLt version: the one runs look for (record_path), and the one
    --place gives a record from its own content (canonical_name)."""
    return f"{slug(card)}-cublaslt{version}.json"


def record_path(card: str, version: int) -> Path:
    return record_dir() / record_name(card, version)


def fastest(times: list) -> int:
    """Index of the smallest time among those measured (None or NaN: the candidate failed)."""
    measured = [(t, i) for i, t in enumerate(times) if t is not None and not math.isnan(t)]
    if not measured:
        raise RecordError("no candidate of this product ran")
    return min(measured)[1]


def read_record(path: Path) -> dict:
    """The record's products (key text -> choice); {} where there is no file. A file that is not a record stops
    the run: it was meant to be read."""
    return read_record_digest(path)[0]


def read_record_digest(path: Path) -> tuple[dict, str | None]:
    """read_record's products and the sha256 of the bytes they were parsed from (None where there is no file): the
    digest a run's log gives, so that the record a run used is known by its content, not only by a cache's path."""
    if not path.exists():
        return {}, None
    raw = path.read_bytes()
    try:
        data = json.loads(raw.decode())
        products = data["products"]
        if not isinstance(products, dict):
            raise TypeError("'products' is not a mapping")
        for text, choice in products.items():
            parse_key(text)
            if len(choice["algo"]) != 8 or int(choice["workspace"]) < 0:
                raise ValueError(f"{text}: 'algo' has 8 words and 'workspace' is a byte count")
    except (ValueError, TypeError, KeyError) as e:
        raise RecordError(f"products record {path}: not a record ({type(e).__name__}: {e}); delete it or rebuild "
                          f"it with `python -m tr2.cupy_side.products`") from None
    return products, hashlib.sha256(raw).hexdigest()


def required(default: bool = False) -> bool:
    """TR2_REQUIRE_PRODUCTS: 1 where a run must read its card's record, 0 where a missing record means cuBLASLt's
    heuristic chooses; unset, `default`: off for a single run (tr2.train, the tests), on for a stage on a GPU card
    (tr2.cards.check_products_record: the protocol's amendment 4.3 times the products). The 59th session's edition
    runs read none, the carry having named the file by its digest, and took the heuristic's choices without a word."""
    value = os.environ.get("TR2_REQUIRE_PRODUCTS", "").strip()
    if value not in ("", "0", "1"):
        raise RecordError(f"TR2_REQUIRE_PRODUCTS: {value!r} is not allowed; allowed: 1 (a run without its card's "
                          "products record stops), 0 (cuBLASLt's heuristic chooses where there is none), or unset")
    return default if value == "" else value == "1"


def folder_listing(folder: Path) -> str:
    """What a record folder holds, said in a few words, for an error that names the file it lacks."""
    if not folder.is_dir():
        return f"{folder} does not exist"
    names = sorted(p.name for p in folder.iterdir())
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return f"{folder} holds {shown}" if names else f"{folder} is empty"


def check_required(path: Path, digest: str | None, card: str, version: int) -> None:
    """Stop where TR2_REQUIRE_PRODUCTS=1 and the run read no record (digest None), naming the file it looked for,
    what the folder holds and how to put the record there."""
    if digest is None and required():
        raise RecordError(
            f"TR2_REQUIRE_PRODUCTS=1 and there is no products record at {path} (card {card!r}, cuBLASLt {version}); "
            f"{folder_listing(path.parent)}; allowed: the record under that name (`python -m tr2.cupy_side.products "
            f"--place FILE` puts a record under the name its content gives; `python -m tr2.cupy_side.products` "
            "builds one), or TR2_REQUIRE_PRODUCTS=0 to let cuBLASLt's heuristic choose")


def records_for(card: str) -> list[Path]:
    """The records of a card in the record folder, any cuBLASLt version (the stage's check before its runs, which
    knows the GPU's name but not yet the cuBLASLt version its runs will load)."""
    folder = record_dir()
    # record_name's form, any version; not a kept copy's NAME-<digest>.json
    name = re.compile(re.escape(slug(card)) + r"-cublaslt[0-9]+\.json")
    return sorted(p for p in folder.iterdir() if name.fullmatch(p.name)) if folder.is_dir() else []


def canonical_name(path: Path) -> str:
    """The file name a record's own content gives it (its card and cuBLASLt version): the one record_path looks
    for. A file that is not a record, or lacks either field, stops here naming the file."""
    read_record_digest(path)   # a record, or RecordError naming the file
    try:
        data = json.loads(path.read_bytes().decode())
        return record_name(str(data["card"]), int(data["cublaslt_version"]))
    except (KeyError, TypeError, ValueError) as e:
        raise RecordError(f"products record {path}: its 'card' and 'cublaslt_version' give no name "
                          f"({type(e).__name__}: {e})") from None


def place(sources: list[Path], folder: Path) -> list[tuple[Path, Path]]:
    """Copy each record into `folder` under its canonical name (a copy kept by a results folder carries its digest
    in its name, under which no run finds it). Two sources for one name with different bytes are refused before
    anything is copied. Returns (source, destination) pairs."""
    by_name: dict[str, Path] = {}
    for src in sources:
        if not src.is_file():
            raise RecordError(f"products record {src}: not a file; allowed: a record's JSON file")
        name = canonical_name(src)
        if name in by_name and by_name[name].read_bytes() != src.read_bytes():
            raise RecordError(f"products records {by_name[name]} and {src} both name {name} and differ; allowed: one "
                              "record for each card and cuBLASLt version")
        by_name[name] = src
    folder.mkdir(parents=True, exist_ok=True)
    pairs = []
    for name, src in by_name.items():
        dest = folder / name
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=name + ".", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(src.read_bytes())
        os.replace(tmp, dest)
        pairs.append((src, dest))
    return pairs


def write_record(path: Path, card: str, version: int, products: dict) -> None:
    """The whole record, atomically (a reader sees the old file or the new one, never a part)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"card": card, "cublaslt_version": version, "products": dict(sorted(products.items()))}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(body, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def parse_builds(text: str) -> list[str]:
    builds = [b for b in text.split(",") if b]
    bad = [b for b in builds if b not in BUILDS]
    if bad or not builds:
        raise ValueError(f"--builds: {text!r} is not allowed; allowed: a comma-separated list of {', '.join(BUILDS)}")
    return builds


# ---------------------------------------------------------------------------------------------- on the GPU
def device_name() -> str:
    import cupy as cp
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def load_record(version: int) -> tuple[dict, Path]:
    """This card's record for this cuBLASLt version, and its path."""
    products, path, _ = load_record_digest(version)
    return products, path


def load_record_digest(version: int) -> tuple[dict, Path, str | None]:
    """load_record's record and path, and the sha256 of the file as read (None: no record). Where
    TR2_REQUIRE_PRODUCTS=1 a missing record stops the run (check_required)."""
    card = device_name()
    path = record_path(card, version)
    products, digest = read_record_digest(path)
    check_required(path, digest, card, version)
    return products, path, digest


def _scratch(nbytes: int, align: int, dtype: int, seed: int):
    """A device buffer of nbytes at an address of alignment class align, holding normal values of the type."""
    import cupy as cp
    from .gpu import blas
    buf = cp.empty(nbytes + 512, dtype=cp.uint8)
    base = (-buf.data.ptr) % 256
    off = base + (align if align < 256 else 0)
    n = nbytes // lt_element_bytes(dtype)
    x = cp.random.default_rng(seed).standard_normal(n, dtype=cp.float32)
    if dtype == blas.CUDA_R_16F:
        data = x.astype(cp.float16).view(cp.uint8)
    elif dtype == blas.CUDA_R_16BF:
        data = (x.view(cp.uint32) >> 16).astype(cp.uint16).view(cp.uint8)
    elif dtype == blas.CUDA_R_64F:
        data = x.astype(cp.float64).view(cp.uint8)
    else:
        data = x.view(cp.uint8)
    buf[off:off + data.size] = data
    return buf, buf.data.ptr + off


def lt_element_bytes(dtype: int) -> int:
    from .gpu import lt
    return lt.ELEMENT_BYTES[dtype]


def operands(cublas, key):
    """Scratch operands of the key's shapes, types and alignments, its scalars (1, 0) and cuBLASLt descriptors:
    (buffers to keep alive, (A, B, C) pointers, (alpha, beta), desc, layouts)."""
    ta, tb, M, N, K, a_type, lda, b_type, ldb, c_type, ldc, compute, reduced, al_a, al_b, al_c = key
    rows_a, rows_b = (K if ta else M), (N if tb else K)
    bufs = [_scratch(rows_a * lda * lt_element_bytes(a_type), al_a, a_type, 1),
            _scratch(rows_b * ldb * lt_element_bytes(b_type), al_b, b_type, 2),
            _scratch(M * ldc * lt_element_bytes(c_type), al_c, c_type, 3)]
    return (bufs, tuple(p for _, p in bufs), cublas._scalars(compute, 1.0, 0.0), cublas.lt._desc(key),
            cublas.lt._layouts(key))


def capture_calls(stream, fn, reps: int):
    """reps calls of fn (each returning cuBLAS's status, 0 for success) recorded as one graph on stream; None where a
    call fails or the candidate cannot be captured (it invalidated the capture): not a choice."""
    stream.begin_capture()
    failed = True
    try:
        failed = any(fn() for _ in range(reps))
    finally:
        try:
            graph = stream.end_capture()
        except Exception:
            graph, failed = None, True
    return None if failed else graph


def tune(cublas, key, reps: int = 20, rounds: int = 2, in_graph: bool = True) -> dict:
    """Time every cuBLASLt candidate of the product key (and cublasGemmEx) on scratch operands; the choice.

    in_graph: each candidate's reps calls are captured as one CUDA graph and timed as replays (how the step runs
    them); False times them as eager calls back to back (the records before 2026-12-01's eighth session)."""
    import cupy as cp
    from .gpu import blas
    from .gpu.lt import Plan
    lt = cublas.lt
    ta, tb, M, N, K, a_type, lda, b_type, ldb, c_type, ldc, compute, reduced = key[:13]
    bufs, (A, B, C), (alpha, beta), desc, layouts = operands(cublas, key)
    found = lt.candidates(key, desc, layouts)
    if not found:
        raise RecordError(f"cuBLASLt lists no algorithm for {key_text(key)}")
    # a stream of its own: a graph cannot be captured on the legacy default stream
    stream = cp.cuda.Stream(non_blocking=True) if in_graph else cp.cuda.get_current_stream()
    plans = [Plan(desc, layouts, r.algo, int(r.workspace_size), "candidate") for r in found]

    def run_lt(plan):
        return lambda: lt.matmul(plan, A, B, C, alpha, beta, stream.ptr)

    def run_gemmex():
        saved, cublas.lt = cublas.lt, None
        try:
            stream.use()
            cublas.set_math(bool(reduced))
            cublas.gemm_rm(bool(ta), bool(tb), M, N, K, A, a_type, lda, B, b_type, ldb, C, c_type, ldc, compute)
            return 0
        except blas.CublasError:
            return 1
        finally:
            cublas.lt = saved
            prior.use()

    def time_one(fn) -> float | None:
        for _ in range(3):
            if fn():
                return None   # this candidate refuses the operands: not a choice
        stream.synchronize()
        if in_graph:
            # the step replays its products from a CUDA graph, where a candidate's memset before its kernel
            # costs a node's gap (~4 us on the H200) that back-to-back eager calls hide: time it as the step runs it
            graph = capture(fn)
            if graph is None:
                return None
            graph.launch(stream)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        if in_graph:
            graph.launch(stream)
        else:
            for _ in range(reps):
                fn()
        end.record(stream)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / reps

    def capture(fn):
        return capture_calls(stream, fn, reps)

    prior = cp.cuda.get_current_stream()
    runs = [run_lt(p) for p in plans] + [run_gemmex]
    best = [math.inf] * len(runs)
    for r in range(rounds):   # rotating order, the least of the rounds
        order = list(range(len(runs)))
        order = order[r % len(order):] + order[:r % len(order)]
        for i in order:
            t = time_one(runs[i])
            best[i] = min(best[i], t) if t is not None else best[i]
    times = [None if math.isinf(t) else t for t in best]
    pick = fastest(times[:-1])
    del bufs
    return {"algo": [int(x) for x in found[pick].algo.data], "workspace": int(found[pick].workspace_size), "ms": times[pick],
            "heuristic_ms": times[0], "gemmex_ms": times[-1], "rank": pick, "candidates": len(found),
            "config": lt.config(found[pick].algo), "heuristic_config": lt.config(found[0].algo),
            "timed": "graph" if in_graph else "eager"}


def gather_keys(model: str, build: str) -> set:
    """The product keys of one eager training step (forward and backward) of model in build."""
    import numpy as np
    from ..models import load_model
    from ..weights import init_numpy
    from .gpu.backend import CudaBackend
    from .model import GPT
    dtype, tf32, hr = BUILDS[build]
    cfg = load_model(model)
    be = CudaBackend(dtype, tf32, hr)
    lt = be.ctx.cublas.lt
    if lt is None:
        raise RecordError("gpu/blas.py USE_LT is off: products go through cublasGemmEx, no record to build")
    gpt = GPT(cfg, be, init_numpy(cfg, 1337), seed=1337)
    rs = np.random.default_rng(0)
    x = rs.integers(0, cfg.vocab_size, (cfg.batch_size, cfg.block_size))
    lt.collect = set()
    try:
        gpt.forward(be.to_device(x, dtype=np.int64), be.to_device(x, dtype=np.int64), step=0, training=True)
        gpt.backward()
        be.synchronize()
        return set(lt.collect)
    finally:
        lt.collect = None


DEFAULT_MODELS, DEFAULT_BUILDS = "nanogpt,gpt2-small,gpt2-medium", "bf16r,f16r,tf32,f32"


def card_builds(card: dict) -> tuple[str, str]:
    """The --models and --builds whose products a card's cupy runs take: its models; float32's TF32 build where the
    card has float32, each half type's builds with and without half roundings as the card builds them, and plain
    float32 always (method B runs on every card: protocol rule 54)."""
    from ..configs import cupy_builds   # here: the card's rules, no GPU needed
    builds = ["tf32"] if "float32" in card["dtypes"] else []
    for dtype, stem in (("bfloat16", "bf16"), ("float16", "f16")):
        if dtype in card["dtypes"]:
            builds += [stem + ("r" if hr else "") for hr in cupy_builds(card, dtype)]
    return ",".join(card["models"]), ",".join(builds + ["f32"])


def main(argv=None) -> int:
    p = Parser(prog="python -m tr2.cupy_side.products", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", help=f"comma-separated models (default {DEFAULT_MODELS})")
    p.add_argument("--builds", help=f"comma-separated builds (default {DEFAULT_BUILDS})")
    p.add_argument("--card", help="the models and builds a card's cupy runs take (a name under params/cards/ or a "
                                  "file), instead of --models and --builds: what `make all` times first on a GPU")
    p.add_argument("--retime", action="store_true", help="time keys the record already holds again")
    p.add_argument("--timing", choices=("graph", "eager"), default="graph",
                   help="candidates timed as replays of a captured graph (how the step runs them; default) or as "
                        "eager calls back to back (the records before 2026-12-01's eighth session)")
    p.add_argument("--place", nargs="+", metavar="FILE", type=Path,
                   help="no timing, no GPU: copy each record FILE into the record folder (.cache/products or "
                        "$TR2_PRODUCTS_DIR) under the name its card and cuBLASLt version give, the one runs look for")
    args = p.parse_args(argv)
    if args.place:
        try:
            pairs = place(args.place, record_dir())
        except RecordError as e:
            p.error(str(e))
        for src, dest in pairs:
            print(f"products record {src} -> {dest}")
        return 0
    if args.card is not None:
        if args.models is not None or args.builds is not None:
            p.error(f"--card: {args.card!r} with --models or --builds is not allowed; allowed: --card alone (its models "
                    "and builds), or --models and --builds")
        from .. import Tr2Error
        from ..cards import load_card
        try:
            args.models, args.builds = card_builds(load_card(args.card))
        except Tr2Error as e:
            p.error(str(e))
        print(f"card {args.card}: --models {args.models} --builds {args.builds}", flush=True)
    args.models = DEFAULT_MODELS if args.models is None else args.models
    args.builds = DEFAULT_BUILDS if args.builds is None else args.builds
    try:
        builds = parse_builds(args.builds)
    except ValueError as e:
        p.error(str(e))   # one line on stderr, exit 2, as every tr2 entry point refuses
    from ..models import list_models
    models = [m for m in args.models.split(",") if m]
    if not models or any(m not in list_models() for m in models):
        p.error(f"--models: {args.models!r} is not allowed; allowed: a comma-separated list of {', '.join(list_models())}")
    try:
        import cupy as cp
        if cp.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
    except Exception as e:   # ImportError without CuPy, CUDARuntimeError without a driver or a device
        p.error(f"the products are timed on a GPU and there is none usable here ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else 'no detail'}); allowed: a machine with a CUDA device and CuPy")
    from .gpu.blas import get_cublas
    cublas = get_cublas()
    if cublas.lt is None:
        raise SystemExit("gpu/blas.py USE_LT is off: products go through cublasGemmEx, no record to build")
    lt, card = cublas.lt, device_name()
    path = record_path(card, lt.version)
    products = read_record(path)
    # the record being built cannot be required of the steps that gather its keys (gather_keys' backends)
    os.environ["TR2_REQUIRE_PRODUCTS"] = "0"
    print(f"products record {path} ({len(products)} products); card {card}, cuBLASLt {lt.version}", flush=True)
    for model in models:
        for build in builds:
            keys = sorted(gather_keys(model, build))
            todo = [k for k in keys if args.retime or key_text(k) not in products]
            print(f"{model} {build}: {len(keys)} products, {len(todo)} to time", flush=True)
            for k in todo:
                choice = tune(cublas, k, in_graph=args.timing == "graph")
                products[key_text(k)] = choice
                write_record(path, card, lt.version, products)
                gain = choice["heuristic_ms"] / choice["ms"] if choice["heuristic_ms"] else float("nan")
                print(f"  {key_text(k)}: {choice['candidates']} candidates, heuristic {choice['heuristic_ms']:.4f} ms, "
                      f"gemmex {choice['gemmex_ms'] or float('nan'):.4f}, chosen #{choice['rank']} "
                      f"{choice['ms']:.4f} (x{gain:.3f}) {choice['config']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
