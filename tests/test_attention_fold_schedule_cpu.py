"""The schedule of attention.cu's attention_backward_dkdv_tma_fold (DKDV_TMA_FORM 6), modelled on the CPU: blocks take
(key block, head) from a ticket in order, at most R of them resident at once; each block's two 64-key units walk the
query tiles from the last down to their diagonal, a unit computing a tile only once its sibling has released the
ring's stage S tiles back (the producer refills a stage when both consumers are done with it), and adding its part
of tile qt only when the tile's turn says its unit number. Under any interleaving the model must finish (no unit waits
on one that cannot run) and every tile's sum must be its parts added in unit order, as float32 adds, the bits the
kernel's red.global.add chain makes whatever the schedule. The kernel itself is tested on the GPU
(tests/test_kernels_gpu.py "dkdv_fold")."""
import numpy as np
import pytest

STAGES = 2   # attention.cu's DKDV_TMA_STAGES


def run_schedule(BH: int, T: int, resident: int, rng, reverse_tickets: bool = False) -> dict:
    nqt, nkb = -(-T // 64), -(-T // 128)
    parts = {}                                       # (bh, qt, u) -> the unit's part (float32)
    acc, turn, written = {}, {}, {}
    tickets = list(range(BH * nkb))[::-1 if reverse_tickets else 1]
    running = []                                     # blocks: [bh, units]; unit: dict(u, tiles, it, computed)

    def start_next():
        t = tickets.pop(0)
        kb, bh = t // BH, t % BH
        units = []
        for cw in range(2):
            u = 2 * kb + cw
            seq = list(range(nqt - 1, 2 * kb - 1, -1))   # the block's tiles, the last first, down to its first
            units.append({"u": u, "seq": seq, "it": 0, "computed": False})
        running.append([bh, units])

    while tickets and len(running) < resident:
        start_next()
    steps = 0
    while running:
        moves = []
        for bi, (bh, units) in enumerate(running):
            for ui, unit in enumerate(units):
                if unit["it"] == len(unit["seq"]):
                    continue
                sibling = units[1 - ui]
                qt = unit["seq"][unit["it"]]
                if not unit["computed"]:
                    # the stage of iteration it is refilled once the sibling released iteration it - STAGES
                    if sibling["it"] + (1 if sibling["computed"] else 0) >= unit["it"] - STAGES + 1 or \
                            sibling["it"] == len(sibling["seq"]):
                        moves.append((bi, ui, "compute"))
                elif qt < unit["u"] or turn.get((bh, qt), 0) == unit["u"]:
                    moves.append((bi, ui, "add"))
        assert moves, f"deadlock after {steps} steps: {running}"
        bi, ui, what = moves[rng.integers(len(moves))]
        bh, units = running[bi]
        unit = units[ui]
        qt, u = unit["seq"][unit["it"]], unit["u"]
        if what == "compute":
            unit["computed"] = True
            if qt < u:   # no keys at or before the tile's queries: the stage released, nothing to add
                unit["computed"], unit["it"] = False, unit["it"] + 1
        else:
            part = parts.setdefault((bh, qt, u), np.float32(rng.standard_normal()))
            if u == qt:
                written[(bh, qt)] = part if u == 0 else np.float32(acc[(bh, qt)] + part)
            else:
                acc[(bh, qt)] = part if u == 0 else np.float32(acc[(bh, qt)] + part)
                turn[(bh, qt)] = u + 1
            unit["computed"], unit["it"] = False, unit["it"] + 1
        if all(x["it"] == len(x["seq"]) for x in units):
            running.pop(bi)
            if tickets:
                start_next()
        steps += 1
    return {"parts": parts, "written": written, "nqt": nqt}


@pytest.mark.parametrize("BH, T, resident", [(3, 1024, 2), (4, 1000, 3), (2, 65, 1), (5, 7, 2), (12, 512, 5),
                                             (96, 1024, 132)])
def test_the_fold_finishes_and_sums_in_unit_order(BH, T, resident):
    for seed in range(3):
        r = run_schedule(BH, T, resident, np.random.default_rng(seed))
        assert set(r["written"]) == {(bh, qt) for bh in range(BH) for qt in range(r["nqt"])}
        for (bh, qt), got in r["written"].items():
            want = np.float32(0)
            for u in range(qt + 1):
                want = r["parts"][(bh, qt, u)] if u == 0 else np.float32(want + r["parts"][(bh, qt, u)])
            assert got == want, (bh, qt)


def test_the_model_finds_the_deadlock_of_tickets_handed_out_the_other_way():
    """With the tickets handed out from the last key block down and one block resident, the first block's units wait
    for units whose blocks cannot start: the model says deadlock, so the check above can fail. (The kernel hands the
    tickets out from key block 0 up: a unit only ever waits on units of blocks that drew a ticket before it.)"""
    with pytest.raises(AssertionError, match="deadlock"):
        run_schedule(2, 1024, 1, np.random.default_rng(0), reverse_tickets=True)
