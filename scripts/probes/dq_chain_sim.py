"""Weighs a dQ folded into the resident dK/dV kernel as a chain (docs/perf.md, sixty-first session) before any of it
is written: a discrete-event model of the resident kernel's blocks taking items by tickets, in which each item (a
head's 128-key block) adds its part of every query tile's dQ to a float32 accumulator handed from item to item in a
fixed key-block order, so an item's dQ step for tile m waits until the item before it in the chain has finished its
own step for m, plus a handoff latency L (store to the L2, the flag, the next block's load).

Units: one query tile's dK/dV work (S^T, dP^T, dS, dV, dK) is 1; the dQ step (dS k, and the handoff's own work) is
DQ. An item runs its tiles in order (ascending queries, as now, or descending) and may run its dQ steps up to LAG
tiles behind its main steps (dS^T tiles kept in shared memory meanwhile); one consumer sequence an item (the two
warpgroups in step). Tickets in the kernel's orders: grouped (ceil(grid / key blocks) heads a group, key block by key
block within it, longest first), grouped_rev (the same groups, shortest first), groupsG (groups of G heads, longest
first: between grouped and key-block major, which hold q and dO of G heads in the L2), key-block major over all heads, or
staggerS (each head's key blocks shortest first, S tickets apart, the heads interleaved). The
chain runs in ascending key blocks (the TMA dQ's own order, so its bits) or descending (new bits). Compared with the
program today: the same tickets without the chain or the dQ steps, then the dQ pass, whose measured ratio to the
dK/dV kernel (Nsight Compute, results/h100-perf-20261207f) is passed as DQ_PASS. The program's chained form
(TR2_ATTN_DQ_CHAIN=1, attention.cu's attn_backward_dkdv_dqc_) is grouped_rev, ascending tiles, descending chain.
Its limits, measured (results/h100-perf-20261207h, one H100): the idle shares it gives the grouped dK/dV (9.7%) and
the descending chain (15.5%) are Nsight Compute's (9.7% and 16.8% of the SMs' cycles), but it counts no memory: it
put the ascending chain on key-block-major tickets at x0.919 / x0.881 of today's backward on gpt2-small / gpt2-medium,
where it ran at x1.006 / x1.040 (those tickets reread every head's q and dO at each key block and hold up to a layer's
running sums in flight); on the char model's rows of 256 it was right (x0.90 modelled, x0.938 measured against the
descending chain). Orders that change what the L2 holds need a measurement, not this model.

    python3 scripts/probes/dq_chain_sim.py [--bh 96] [--t 1024] [--grid 132] [--dq-pass 0.480] [--dq 0.15,0.25]
        [--lag 0,1] [--latency 0.5,1.0] [--forms asc/desc,desc/asc]
"""
from __future__ import annotations

import argparse
import heapq
import itertools


def tickets(BH: int, nkb: int, grid: int, order: str) -> list[tuple[int, int]]:
    """(head, key block) of each ticket, as attention.cu's dkdv_item<ORDER> hands them out."""
    if order == "kbmajor":
        return [(bh, kb) for kb in range(nkb) for bh in range(BH)]
    if order.startswith("stagger"):   # staggerS: by h + S (nkb - 1 - kb), the longer key block after: each head's
        S = int(order[len("stagger"):])   # key blocks shortest first, S tickets apart, the heads interleaved
        items = [(bh, kb) for bh in range(BH) for kb in range(nkb)]
        return sorted(items, key=lambda it: (it[0] + S * (nkb - 1 - it[1]), -it[1]))
    # grouped: ceil(grid / nkb) heads a group, about one wave; groupsG: G heads a group (between grouped and kbmajor)
    G = int(order[len("groups"):]) if order.startswith("groups") else -(-grid // nkb)
    out = []
    key_blocks = range(nkb - 1, -1, -1) if order == "grouped_rev" else range(nkb)   # _rev: the shortest first
    for g0 in range(0, BH, G):
        heads = range(g0, min(g0 + G, BH))
        out += [(bh, kb) for kb in key_blocks for bh in heads]
    return out


def item_ops(kb: int, nqt: int, tile_order: str, lag: int, dq: float) -> list[tuple[str, int, float]]:
    """An item's steps in issue order: ("main", m, 1) for each of its tiles m (queries from 2 kb on), and
    ("dq", m, dq) for each, LAG tiles behind its main step (none where dq is 0: the program today)."""
    tiles = list(range(2 * kb, nqt))
    if tile_order == "desc":
        tiles.reverse()
    if dq == 0:
        return [("main", m, 1.0) for m in tiles]
    ops = []
    for i, m in enumerate(tiles):
        ops.append(("main", m, 1.0))
        if i - lag >= 0:
            ops.append(("dq", tiles[i - lag], dq))
    ops += [("dq", m, dq) for m in tiles[max(0, len(tiles) - lag):]]
    return ops


def predecessor(kb: int, m: int, chain: str) -> int | None:
    """The key block whose dQ step for tile m comes just before kb's in the chain (None: kb starts the tile's sum)."""
    last = m // 2   # 64-query tile m sees the keys of 128-key blocks 0 .. m // 2
    if chain == "asc":
        return kb - 1 if kb > 0 else None
    return kb + 1 if kb < last else None


def simulate(BH: int, T: int, grid: int, order: str, tile_order: str, chain: str | None, dq: float, lag: int,
             latency: float) -> dict:
    """The kernel's span and its blocks' idle share (waiting on the chain), or deadlock=True where every block
    holding an item waits on a step no running item will take."""
    nkb, nqt = -(-T // 128), -(-T // 64)
    queue = tickets(BH, nkb, grid, order)
    next_ticket = 0
    done: dict[tuple[int, int, int], float] = {}   # (head, key block, tile) -> the end of its dQ step
    blocks = []   # [ready time, ops, op index, head, kb]
    for _ in range(min(grid, len(queue))):
        bh, kb = queue[next_ticket]
        next_ticket += 1
        blocks.append([0.0, item_ops(kb, nqt, tile_order, lag, dq), 0, bh, kb])
    busy = 0.0
    waited = 0.0
    span = 0.0
    tie = itertools.count()
    while True:
        heap = []
        for i, (ready, ops, k, bh, kb) in enumerate(blocks):
            if ops is None:
                continue
            kind, m, dur = ops[k]
            start = ready
            if kind == "dq" and chain is not None:
                p = predecessor(kb, m, chain)
                if p is not None:
                    if (bh, p, m) not in done:
                        continue   # its turn is not yet known: waits
                    start = max(ready, done[(bh, p, m)] + latency)
            heapq.heappush(heap, (start, next(tie), i))
        if not heap:
            if all(b[1] is None for b in blocks):
                break
            return {"deadlock": True}
        start, _, i = heap[0]
        b = blocks[i]
        kind, m, dur = b[1][b[2]]
        waited += start - b[0]
        end = start + dur
        busy += dur
        span = max(span, end)
        if kind == "dq":
            done[(b[3], b[4], m)] = end
        b[0], b[2] = end, b[2] + 1
        if b[2] == len(b[1]):   # the item is done: the block takes the next ticket
            if next_ticket < len(queue):
                bh, kb = queue[next_ticket]
                next_ticket += 1
                b[1], b[2], b[3], b[4] = item_ops(kb, nqt, tile_order, lag, dq), 0, bh, kb
            else:
                b[1] = None
    return {"deadlock": False, "span": span, "busy": busy, "waited": waited,
            "idle_share": 1 - busy / (span * min(grid, len(queue)))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bh", type=int, default=96, help="batch x heads (gpt2-small's 8 x 12 = 96; gpt2-medium 128)")
    ap.add_argument("--t", type=int, default=1024)
    ap.add_argument("--grid", type=int, default=132)
    ap.add_argument("--dq-pass", type=float, default=0.480,
                    help="the dQ pass's time over the dK/dV kernel's, measured (gpt2-small 52.99 / 110.37 us)")
    ap.add_argument("--dq", default="0.15,0.25,0.35", help="the dQ step's cost, a tile's dK/dV work being 1")
    ap.add_argument("--lag", default="0,1,2", help="how many tiles an item's dQ steps may run behind its main ones")
    ap.add_argument("--latency", default="0.5,1.0,1.5", help="the handoff's latency L, in tiles")
    ap.add_argument("--forms", default="asc/asc,asc/desc,desc/asc,desc/desc",
                    help="tile order / chain order pairs")
    ap.add_argument("--tickets", default="grouped",
                    help="grouped, grouped_rev (key blocks shortest first), groupsG (G heads a group), kbmajor, "
                         "staggerS (see tickets)")
    args = ap.parse_args()

    def floats(text: str) -> list[float]:
        return [float(x) for x in text.split(",")]
    base = simulate(args.bh, args.t, args.grid, "grouped", "asc", None, 0.0, 0, 0.0)
    today = base["span"] * (1 + args.dq_pass)
    print(f"BH {args.bh}, T {args.t}, grid {args.grid}: the dK/dV kernel today spans {base['span']:.1f} tiles "
          f"(idle {base['idle_share']:.1%}), with the dQ pass x{1 + args.dq_pass:.3f}: {today:.1f}")
    print(f"{'tickets':8} {'tiles':5} {'chain':5} {'DQ':>5} {'lag':>3} {'L':>4} {'span':>7} {'idle':>6} "
          f"{'/ today':>8}")
    forms = [tuple(f.split("/")) for f in args.forms.split(",")]
    for (tile_order, chain), order, dq, lag, latency in itertools.product(
            forms, args.tickets.split(","), floats(args.dq), [int(x) for x in args.lag.split(",")], floats(args.latency)):
        r = simulate(args.bh, args.t, args.grid, order, tile_order, chain, dq, lag, latency)
        if r["deadlock"]:
            print(f"{order:8} {tile_order:5} {chain:5} {dq:5.2f} {lag:3d} {latency:4.1f}  deadlock")
            continue
        print(f"{order:8} {tile_order:5} {chain:5} {dq:5.2f} {lag:3d} {latency:4.1f} {r['span']:7.1f} "
              f"{r['idle_share']:6.1%} {r['span'] / today:8.3f}")


if __name__ == "__main__":
    main()
