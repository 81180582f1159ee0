"""What a captured graph's shape costs its launch on the host: the step graph's nodes by kind and by how they connect,
and how long `cudaGraphLaunch` takes, for the training step of a model and for chains of empty kernels with one
thing changed at a time.

    python3 scripts/probes/graph_launch_probe.py [--model gpt2-small] [--dtype bfloat16] [--launches 21]
                                                 [--chain 1000] [--out FILE.jsonl]

Why: after every loss read (one step in ten) the device waits for about the whole launch of the next step's graph
(results/h200-perf-20261205f, `trace_gaps.py --starts`: 411-704 µs on gpt2-small bf16, the host's `cudaGraphLaunch`
medians 407-705 µs), about 40 µs a step. NVIDIA describes a launch whose host time does not grow with the node count
for graphs that are a straight line of kernel nodes (CUDA 12.6 on, "constant time launch for straight-line graphs");
ours, some 300 nodes (140 launches of our kernels and 147 products), takes 1.4-2.4 µs a node. The chains say which
departure from a straight line costs what on this driver (a memset node, a memcpy node, one fork and join, one kernel
launched in a cluster); the step graph's own count says which of them it has. What comes of it is decided on the card,
not here.

Each launch is timed on the host from just before `cudaGraphLaunch` to its return, after a synchronize (the device
idle, as after a loss read: `idle`) and back to back (the device busy with the previous launch: `busy`); medians of
--launches. One JSON line a graph with --out, and a table last.
"""
from __future__ import annotations

import collections
import ctypes
import json
import statistics
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lib"))

# CUgraphNodeType (cuda.h)
KINDS = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "child graph", 5: "empty", 6: "event wait",
         7: "event record", 8: "semaphore signal", 9: "semaphore wait", 10: "mem alloc", 11: "mem free",
         12: "batch mem op", 13: "conditional"}
CLUSTER_DIMENSION = 4   # CUlaunchAttributeID: CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
CHAINS = ("chain", "chain + memset", "chain + memcpy", "chain + fork/join", "chain + cluster kernel")


def graph_shape(nodes, kind_of, deps_of, programmatic_of=None) -> dict:
    """The shape of a graph from its nodes, each one's kind (a CUgraphNodeType value), the nodes it depends on, and
    (optionally) how many of those edges are programmatic (edge data other than plain): counts by kind, roots,
    leaves, nodes with more than one edge in or out, and whether it is a straight line (one root, every node at most
    one edge in and one out, every node a kernel, no programmatic edge)."""
    nodes = list(nodes)
    known = set(nodes)
    fan_out = collections.Counter()
    fan_in = {}
    for n in nodes:
        ds = list(deps_of(n))
        unknown = [d for d in ds if d not in known]
        if unknown:
            raise ValueError(f"node {n!r} depends on {unknown[0]!r}, not a node of the graph")
        fan_in[n] = len(ds)
        for d in ds:
            fan_out[d] += 1
    kinds = collections.Counter(KINDS.get(kind_of(n), f"type {kind_of(n)}") for n in nodes)
    programmatic = sum(programmatic_of(n) for n in nodes) if programmatic_of else 0
    roots = [n for n in nodes if fan_in[n] == 0]
    leaves = [n for n in nodes if fan_out[n] == 0]
    joins = sum(1 for n in nodes if fan_in[n] > 1)
    forks = sum(1 for n in nodes if fan_out[n] > 1)
    straight = bool(nodes) and len(roots) == 1 and joins == 0 and forks == 0 and set(kinds) == {"kernel"} \
        and programmatic == 0
    return {"nodes": len(nodes), "kinds": dict(sorted(kinds.items())), "edges": sum(fan_in.values()),
            "programmatic_edges": programmatic, "roots": len(roots), "leaves": len(leaves), "joins": joins,
            "forks": forks, "straight_line": straight}


def median_us(seconds) -> float:
    return round(statistics.median(seconds) * 1e6, 1)


def parse(argv):
    from tr2 import trainargs

    class Parser(trainargs.Parser):   # one line under this script's name, an option given twice refused
        def error(self, message):
            sys.stderr.write(f"graph_launch_probe: error: {message}\n")
            sys.exit(2)

    p = Parser(prog="python3 scripts/probes/graph_launch_probe.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2-small")
    p.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--launches", type=int, default=21)
    p.add_argument("--chain", type=int, default=1000, help="kernels in each synthetic chain")
    p.add_argument("--out", default=None, help="a JSON lines file (its folder must exist)")
    a = p.parse_args(argv)
    if a.launches < 3:
        p.error(f"--launches: {a.launches}; allowed: a whole number from 3")
    if a.chain < 2:
        p.error(f"--chain: {a.chain}; allowed: a whole number from 2")
    from tr2.models import list_models   # the names only: no GPU needed to refuse one
    if a.model not in list_models():
        p.error(f"--model: {a.model!r}; allowed: {' | '.join(list_models())}")
    if a.out is not None and not Path(a.out).resolve().parent.is_dir():
        p.error(f"--out: {a.out!r}: its folder does not exist; allowed: a file in an existing folder")
    return a


# ------------------------------------------------------------------------------------------------- on the GPU
class _Graphs:
    """libcuda's node queries, typed once (the edge-data forms of CUDA 12.3, as gpu/memsets.py reads them)."""

    def __init__(self):
        from tr2.cupy_side.gpu import memsets
        self.driver = memsets._Driver.get()
        cuda = self.driver.cuda
        vp, P = ctypes.c_void_p, ctypes.POINTER
        cuda.cuGraphGetNodes.argtypes = [vp, P(vp), P(ctypes.c_size_t)]
        cuda.cuGraphGetNodes.restype = ctypes.c_int
        cuda.cuGraphKernelNodeGetAttribute.argtypes = [vp, ctypes.c_int, ctypes.c_char_p]
        cuda.cuGraphKernelNodeGetAttribute.restype = ctypes.c_int
        self.cuda = cuda

    def cluster(self, node: int):
        """A kernel node's cluster shape (x, y, z; (0, 0, 0) where none was set), None where the driver will not
        say: cuBLAS's Hopper kernels may launch in clusters, one more way a node can differ from a plain launch."""
        value = ctypes.create_string_buffer(64)   # CUlaunchAttributeValue, a 64-byte union
        if self.cuda.cuGraphKernelNodeGetAttribute(ctypes.c_void_p(node), CLUSTER_DIMENSION, value) != 0:
            return None
        return tuple(int.from_bytes(value.raw[4 * i:4 * i + 4], "little") for i in range(3))

    def nodes(self, graph: int) -> list[int]:
        count = ctypes.c_size_t()
        self.driver._check(self.cuda.cuGraphGetNodes(ctypes.c_void_p(graph), None, ctypes.byref(count)),
                           "cuGraphGetNodes")
        out = (ctypes.c_void_p * max(count.value, 1))()
        self.driver._check(self.cuda.cuGraphGetNodes(ctypes.c_void_p(graph), out, ctypes.byref(count)),
                           "cuGraphGetNodes")
        return [int(out[i]) for i in range(count.value)]

    def shape(self, graph: int) -> dict:
        edges, clusters, memset_bytes = {}, collections.Counter(), []
        for n in self.nodes(graph):
            deps, plain = self.driver._edges_into(n)
            edges[n] = (deps, sum(1 for p in plain if not p))
            kind = self.driver.kind(n)
            if kind == 0:
                c = self.cluster(n)
                clusters["not said" if c is None else "x".join(map(str, c)) if max(c) > 1 else "none"] += 1
            elif kind == 2:   # which memsets a graph holds, by their size (wpe's gradient, the sort's counters ...)
                first, end = self.driver.memset_range(n)
                memset_bytes.append(end - first)
        out = graph_shape(edges, self.driver.kind, lambda n: edges[n][0], lambda n: edges[n][1])
        return {**out, "kernel_clusters": dict(sorted(clusters.items())), "memset_bytes": sorted(memset_bytes)}


def time_launches(launch, sync, n: int) -> dict:
    """Host seconds of each launch call: after a synchronize (idle), then n back to back (busy)."""
    idle, busy = [], []
    for _ in range(n):
        sync()
        t0 = time.perf_counter()
        launch()
        idle.append(time.perf_counter() - t0)
    sync()
    for _ in range(n):
        t0 = time.perf_counter()
        launch()
        busy.append(time.perf_counter() - t0)
    sync()
    return {"idle_us": median_us(idle), "busy_us": median_us(busy), "idle_all_us": [round(x * 1e6, 1) for x in idle]}


def cluster_launch(function_ptr: int, arg_ptr: int, stream_ptr: int) -> None:
    """One launch of a one-pointer kernel as two blocks in a cluster of two (cuLaunchKernelEx with the cluster
    dimension attribute), captured as a kernel node with that attribute."""
    from tr2.cupy_side.gpu import pdl
    attr = pdl.LaunchAttribute()
    attr.id = CLUSTER_DIMENSION
    packed = struct.pack("<3I", 2, 1, 1)   # copied in: assigning bytes to a char array stops at the first zero byte
    ctypes.memmove(ctypes.addressof(attr) + pdl.LaunchAttribute.value.offset, packed, len(packed))
    config = pdl.LaunchConfig(2, 1, 1, 32, 1, 1, 0, ctypes.c_void_p(stream_ptr), ctypes.pointer(attr), 1)
    arg = ctypes.c_uint64(arg_ptr)
    params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
    rc = pdl._driver().cuLaunchKernelEx(ctypes.byref(config), ctypes.c_void_p(function_ptr), params, None)
    if rc != 0:
        raise RuntimeError(f"cuLaunchKernelEx with a cluster of two: CUresult {rc}")


def chains(n_kernels: int, launches: int):
    """Chains of n empty kernels captured on one stream, each with one change; (name, shape, times)."""
    import cupy as cp
    from tr2.cupy_side.gpu import memsets
    rt = cp.cuda.runtime
    nop = cp.RawModule(code='extern "C" __global__ void nop(int* p) { if (p == 0) __trap(); }').get_function("nop")
    buf, other = cp.zeros(64, cp.int32), cp.zeros(64, cp.int32)
    s, side = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    graphs = _Graphs()
    for name in CHAINS:
        s.begin_capture()
        for i in range(n_kernels):
            if i == n_kernels // 2:
                if name == "chain + memset":
                    rt.memsetAsync(buf.data.ptr, 0, 4, s.ptr)
                elif name == "chain + memcpy":
                    rt.memcpyAsync(other.data.ptr, buf.data.ptr, 4, rt.memcpyDeviceToDevice, s.ptr)
                elif name == "chain + fork/join":
                    fork = cp.cuda.Event(disable_timing=True)
                    fork.record(s)
                    side.wait_event(fork)
                    nop((1,), (32,), (other,), stream=side)
                    join = cp.cuda.Event(disable_timing=True)
                    join.record(side)
                    s.wait_event(join)
                elif name == "chain + cluster kernel":   # as cuBLAS's Hopper kernels may launch
                    cluster_launch(nop.kernel.ptr, buf.data.ptr, s.ptr)   # the RawKernel's CUfunction
            nop((1,), (32,), (buf,), stream=s)
        g = memsets.OwnedGraph.end_capture(s, rt)
        shape = graphs.shape(g.graph)
        g.instantiate()
        g.launch(s)   # the first launch uploads; the timed ones are repeats
        s.synchronize()
        times = time_launches(lambda graph=g: graph.launch(s), s.synchronize, launches)
        del g   # both handles destroyed before the next chain is captured
        yield name, shape, times


def step_graph(model: str, dtype: str, launches: int):
    """The training step's graph as --cuda-graph builds it (half roundings, the compared build), captured at
    iteration 1 after the eager warm-up; (shape, times). Its shape is read from the cudaGraph_t that gpu/memsets.py
    holds beside the instantiated graph (value 4, the default: the graph as instantiated, its memset leaves gone),
    else not at all."""
    from tr2.cupy_side import train
    from tr2.cupy_side.backend import get_backend
    from tr2.cupy_side.model import GPT
    from tr2.cupy_side.optim import AdamW, LossScaler
    from tr2.data import BatchSource
    from tr2.models import load_model
    from tr2.weights import init_numpy
    cfg = load_model(model)
    backend = get_backend("cuda", dtype, tf32=True, half_roundings=dtype != "float32")
    m = GPT(cfg, backend, init_numpy(cfg, 1337), seed=1337)
    opt = AdamW(backend, m.params, (cfg.beta1, cfg.beta2), cfg.eps_adam, cfg.weight_decay)
    step = train._TrainStepGraph(backend, m, opt, LossScaler(backend, enabled=dtype == "float16"), cfg)
    backend.synchronize()
    X, Y = BatchSource(cfg.dataset, cfg.block_size, cfg.batch_size, 1337, None).train_batch(0)
    with step.stream:
        for it in range(2):   # warm-up, then the capture and its first replay
            step.step(it, X, Y, 6e-4)
        step.stream.synchronize()
        graph = step.graph.graph
        if hasattr(graph, "rt"):
            shape = _Graphs().shape(graph.graph)
        else:
            shape = {"nodes": None, "note": "not an OwnedGraph (TR2_MEMSET_EARLY other than 4)"}
        times = time_launches(step.graph.replay, step.stream.synchronize, launches)
    return shape, times


def main(argv) -> int:
    a = parse(argv)
    import cupy as cp
    rows = []
    for name, shape, times in chains(a.chain, a.launches):
        rows.append({"graph": name, **shape, **times})
        print(f"{name}: {json.dumps(rows[-1])}", flush=True)
    shape, times = step_graph(a.model, a.dtype, a.launches)
    rows.append({"graph": f"step {a.model} {a.dtype}", **shape, **times})
    print(f"step: {json.dumps(rows[-1])}", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            for r in rows:
                f.write(json.dumps({**r, "driver": cp.cuda.runtime.driverGetVersion(),
                                    "runtime": cp.cuda.runtime.runtimeGetVersion()}) + "\n")
    print(f"{'graph':<28} {'nodes':>6} {'straight':>8} {'idle µs':>8} {'busy µs':>8}  kinds")
    for r in rows:
        print(f"{r['graph']:<28} {r.get('nodes') or '?':>6} {str(r.get('straight_line')):>8} {r['idle_us']:>8} "
              f"{r['busy_us']:>8}  {r.get('kinds')} joins {r.get('joins')} forks {r.get('forks')} "
              f"programmatic {r.get('programmatic_edges')} clusters {r.get('kernel_clusters')} "
              f"memsets {r.get('memset_bytes')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
