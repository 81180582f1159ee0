"""The schedule of attention.cu's bulk form (TR2_ATTN_DQ_BULK=1, attn_backward_dkdvq_tmarb_), modelled on the CPU.

R blocks are resident. Each holds at most two items at a time (the two k/v buffers): its first item by its index, each
later one the next ticket, drawn once the block's consumers are done with the item two before. An item is key block
kb of head bh (ticket t: kb = t // BH, bh = t % BH); its consumers walk query tiles 2 kb .. nqt - 1 in order and hand
each tile's part to the block's writer through two buffers (a part waits for a free one). The writer takes the parts
in the order they came and adds part (bh, qt, kb) only when the turn of (bh, qt) says kb: key block 0 stores it, the
next ones add it, key block qt // 2 adds it to the sum and writes the tile. The two consumers of a block run in step
(the named barrier of each tile) and their column halves have turns of their own, alike: one stands for both here.

Under random interleavings the model must finish (no writer waits on a part that cannot come) and every tile must be
written once, its parts added in key-block order as float32 adds: the bits the kernel's reductions make whatever the
schedule. The kernel itself is tested on the GPU (tests/test_kernels_gpu.py, "dq_bulk")."""
import numpy as np
import pytest

BUFFERS = 2   # part buffers a consumer (attention.cu's part_full / part_empty pairs)


def run_schedule(BH: int, T: int, resident: int, rng, reverse_tickets: bool = False) -> dict:
    nqt, nkb = -(-T // 64), -(-T // 128)
    order = list(range(BH * nkb))
    if reverse_tickets:
        order = order[::-1]
    next_ticket = [min(resident, len(order))]   # the first `resident` items go by block index
    parts, acc, turn, written = {}, {}, {}, {}
    blocks = []
    for b in range(min(resident, len(order))):
        blocks.append({"items": [order[b]], "tile": 0, "done_items": 0, "fifo": [], "drawn_all": False})

    def tiles(item):
        kb = item // BH
        return list(range(2 * kb, nqt))

    def can_draw(blk):
        # a third item waits for the consumers to finish the item two before it (its k/v buffer)
        return not blk["drawn_all"] and len(blk["items"]) - blk["done_items"] < 2

    steps = 0
    while True:
        moves = []
        for bi, blk in enumerate(blocks):
            if can_draw(blk):
                moves.append((bi, "draw"))
            if blk["done_items"] < len(blk["items"]) and len(blk["fifo"]) < BUFFERS:
                moves.append((bi, "compute"))
            if blk["fifo"]:
                bh, qt, kb = blk["fifo"][0]
                if kb == 0 or turn.get((bh, qt), 0) == kb:
                    moves.append((bi, "write"))
        if not moves:
            busy = [b for b in blocks if b["fifo"] or b["done_items"] < len(b["items"])]
            assert not busy, f"deadlock after {steps} steps: {busy}"
            break
        bi, what = moves[rng.integers(len(moves))]
        blk = blocks[bi]
        if what == "draw":
            if next_ticket[0] < len(order):
                blk["items"].append(order[next_ticket[0]])
                next_ticket[0] += 1
            else:
                blk["drawn_all"] = True
        elif what == "compute":
            item = blk["items"][blk["done_items"]]
            kb, bh = item // BH, item % BH
            qt = tiles(item)[blk["tile"]]
            parts[(bh, qt, kb)] = np.float32(rng.standard_normal())
            blk["fifo"].append((bh, qt, kb))
            blk["tile"] += 1
            if blk["tile"] == len(tiles(item)):
                blk["tile"], blk["done_items"] = 0, blk["done_items"] + 1
        else:
            bh, qt, kb = blk["fifo"].pop(0)
            part = parts[(bh, qt, kb)]
            if kb == qt // 2:
                assert (bh, qt) not in written
                written[(bh, qt)] = part if kb == 0 else np.float32(acc[(bh, qt)] + part)
            else:
                acc[(bh, qt)] = part if kb == 0 else np.float32(acc[(bh, qt)] + part)
                turn[(bh, qt)] = kb + 1
        steps += 1
    return {"parts": parts, "written": written, "nqt": nqt}


@pytest.mark.parametrize("BH, T, resident", [(3, 1024, 2), (4, 1000, 3), (2, 65, 1), (5, 7, 2), (12, 512, 5),
                                             (1, 1024, 1), (96, 1024, 132), (128, 1024, 132)])
def test_the_bulk_form_finishes_and_sums_in_key_block_order(BH, T, resident):
    for seed in range(3):
        r = run_schedule(BH, T, resident, np.random.default_rng(seed))
        assert set(r["written"]) == {(bh, qt) for bh in range(BH) for qt in range(r["nqt"])}
        for (bh, qt), got in r["written"].items():
            want = np.float32(0)
            for kb in range(qt // 2 + 1):
                part = r["parts"][(bh, qt, kb)]
                want = part if kb == 0 else np.float32(want + part)
            assert got == want, (bh, qt)


def test_the_model_finds_the_deadlock_of_tickets_handed_out_the_other_way():
    """Tickets from the last key block down, one block resident: its writer waits on a turn that only a later item
    of its own block could pass: the model says deadlock, so the check above can fail. (The kernel hands the tickets
    out from key block 0 up: an item's writer only waits on items drawn before it.)"""
    with pytest.raises(AssertionError, match="deadlock"):
        run_schedule(2, 1024, 1, np.random.default_rng(0), reverse_tickets=True)
