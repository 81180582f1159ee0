"""The latency of one handoff of a 16 KB float32 tile between two blocks (dq_handoff_probe.cu says what is measured),
the number scripts/probes/dq_chain_sim.py needs to weigh a dQ chained through the resident dK/dV kernel: that fold
pays where a handoff costs well under one query tile's dK/dV work and loses from about 1.5 tiles (results/
cpu-checks-20261207f). The tile's time comes from the sixty-first session's Nsight Compute of the grouped dK/dV
(results/h100-perf-20261207f, H100): the kernel's span times its 132 SMs over its query tiles.

On the GPU machine, from the repository root (NVRTC as the project finds it; the cubin for sm_90a):

    PYTHONPATH=lib python3 scripts/probes/dq_handoff_probe.py OUT.jsonl [ITERS]

Prints a line a form and pair count, and writes them as JSON lines: the hop's latency in µs (the median of five
launches), in tiles of gpt2-small and gpt2-medium, and whether every element came back as 2 ITERS (each hop adds 1).
"""
from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

CU_FILE = Path(__file__).resolve().parent / "dq_handoff_probe.cu"


def tiles_per_head(nkb: int = 8) -> int:
    """The 64-query tiles a head's 128-key blocks see under the causal mask (key block kb: 2 (nkb - kb))."""
    return sum(2 * (nkb - kb) for kb in range(nkb))


# one query tile of the grouped dK/dV, µs: the kernel (Nsight Compute, one launch) x 132 SMs / its tiles (heads x 72)
TILE_US = {"gpt2-small": 110.37 * 132 / (96 * tiles_per_head()), "gpt2-medium": 142.02 * 132 / (128 * tiles_per_head())}


def hop_us(elapsed_ns: list[int], iters: int) -> float:
    """The median pair's time a hop, µs (2 iters hops a pair)."""
    return statistics.median(elapsed_ns) / (2 * iters) / 1000.0


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    iters = int(argv[1]) if len(argv) > 1 else 2000
    import cupy as cp
    from tr2.cupy_side.gpu import cubins
    nvrtc = cubins.Nvrtc()
    cubin = nvrtc.compile(CU_FILE.read_text(), CU_FILE.name, "sm_90a", ("-Xptxas", "-v"))
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    kernel = cp.RawModule(path=f.name).get_function("handoff")
    print(f"NVRTC {nvrtc.version()}: {len(cubin)} bytes; "
          + " ".join(line.strip() for line in nvrtc.last_log.splitlines() if "Used" in line))
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    rows = []
    with out.open("w") as fh:
        for bulk in (0, 1):
            for pairs in (1, 8, sms // 2):
                bufs = cp.zeros(pairs * 4096, cp.float32)
                flags = cp.zeros(pairs * 32, cp.int32)
                elapsed = cp.zeros(pairs, cp.uint64)
                stuck = cp.zeros(1, cp.int32)
                hops, ok = [], True
                for _ in range(5):
                    bufs.fill(0)
                    flags.fill(0)
                    kernel((2 * pairs,), (256,), (bufs, flags, cp.int32(iters), cp.int32(bulk), elapsed, stuck))
                    cp.cuda.runtime.deviceSynchronize()
                    ok = ok and int(stuck[0]) == 0 and bool((bufs == 2 * iters).all())
                    hops.append(hop_us([int(x) for x in elapsed.get()], iters))
                us = statistics.median(hops)
                row = {"form": "bulk" if bulk else "threads", "pairs": pairs, "iters": iters, "hop_us": us,
                       "hop_us_runs": hops, "tiles_gpt2_small": us / TILE_US["gpt2-small"],
                       "tiles_gpt2_medium": us / TILE_US["gpt2-medium"], "values_ok": ok}
                rows.append(row)
                fh.write(json.dumps(row) + "\n")
                print(f"{row['form']:8} pairs {pairs:3d}: a hop {us:6.3f} us = {row['tiles_gpt2_small']:.2f} tiles of "
                      f"gpt2-small, {row['tiles_gpt2_medium']:.2f} of gpt2-medium; values {'ok' if ok else 'WRONG'}",
                      flush=True)
    return 0 if all(r["values_ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
