"""The schedule of attention.cu's bulk form (TR2_ATTN_DQ_BULK=1, attn_backward_dkdvq_tmarb_), modelled on the CPU.

R blocks are resident. Each holds at most two items at a time (the two k/v buffers): its first item by its index, each
later one the next ticket, drawn once the block's consumers are done with the item two before. An item is key block
kb of head bh (ticket t: kb = t // BH, bh = t % BH); its consumers walk query tiles 2 kb .. nqt - 1 in order and hand
each tile's part to the block's writer through two buffers (a part waits for a free one). The writer takes the parts
in the order they came and adds part (bh, qt, kb) only when the turn of (bh, qt) says kb: key block 0 stores it, the
next ones add it, key block qt // 2 adds it to the sum and writes the tile. The two consumers of a block run in step
(the named barrier of each tile) and their column halves have turns of their own, alike: one stands for both here.
Split 2 (TR2_ATTN_DQ_BULK=2, run_schedule_split2) has no barrier and one turn a tile for both consumers' parts.

The writer passes a turn on only once its reduction has completed, and does not wait for that: the turn is owed while
it takes the next part (attention.cu's OwedTurn). It pays an owed turn after issuing its next part, and before it
waits on anything (no part ready, a turn not yet come, the last unit's sum): paying is bounded, so a writer never waits
while it holds a turn. The model pays an owed turn in those places only.

Under random interleavings the model must finish (no writer waits on a part that cannot come) and every tile must be
written once, its parts added in key-block order as float32 adds: the bits the kernel's reductions make whatever the
schedule. The kernel itself is tested on the GPU (tests/test_kernels_gpu.py, "dq_bulk")."""
import numpy as np
import pytest

BUFFERS = 2   # part buffers a consumer (attention.cu's part_full / part_empty pairs)


def _tickets(BH: int, T: int, resident: int, reverse: bool) -> tuple:
    """(query tiles a head, the items in ticket order, [the next ticket]): items are key block kb of head bh, ticket
    kb BH + bh, the first `resident` by block index."""
    nqt, nkb = -(-T // 64), -(-T // 128)
    order = list(range(BH * nkb))
    return nqt, order[::-1] if reverse else order, [min(resident, len(order))]


def _draw(blk: dict, order: list, next_ticket: list) -> None:
    """The block's producer draws its next item, or learns that none is left."""
    if next_ticket[0] < len(order):
        blk["items"].append(order[next_ticket[0]])
        next_ticket[0] += 1
    else:
        blk["drawn_all"] = True


def _assert_sums_in_order(r: dict, BH: int, units) -> None:
    """Every tile written once, as its parts added in order as float32: units(qt) the tile's part indices in turn."""
    assert set(r["written"]) == {(bh, qt) for bh in range(BH) for qt in range(r["nqt"])}
    for (bh, qt), got in r["written"].items():
        want = np.float32(0)
        for n, unit in enumerate(units(qt)):
            part = r["parts"][(bh, qt, unit)]
            want = part if n == 0 else np.float32(want + part)
        assert got == want, (bh, qt)


def _pay(owed: list, turn: dict) -> None:
    """A writer's owed turn passed on (its reduction has completed by now)."""
    if owed:
        slot, value = owed.pop()
        turn[slot] = value


def run_schedule(BH: int, T: int, resident: int, rng, reverse_tickets: bool = False, pay_when_waiting: bool = True) -> dict:
    """pay_when_waiting=False: a writer pays an owed turn only after issuing its next part, never before it waits (the
    model must then find a deadlock: the check can fail)."""
    nqt, order, next_ticket = _tickets(BH, T, resident, reverse_tickets)
    parts, acc, turn, written = {}, {}, {}, {}
    blocks = []
    for b in range(min(resident, len(order))):
        blocks.append({"items": [order[b]], "tile": 0, "done_items": 0, "fifo": [], "drawn_all": False, "owed": []})

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
                elif blk["owed"] and pay_when_waiting:
                    moves.append((bi, "pay"))   # the turn not yet come
            elif blk["owed"] and pay_when_waiting:
                moves.append((bi, "pay"))   # no part ready
        if not moves:
            busy = [b for b in blocks if b["fifo"] or b["done_items"] < len(b["items"]) or b["owed"]]
            assert not busy, f"deadlock after {steps} steps: {busy}"
            break
        bi, what = moves[rng.integers(len(moves))]
        blk = blocks[bi]
        if what == "draw":
            _draw(blk, order, next_ticket)
        elif what == "pay":
            _pay(blk["owed"], turn)
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
                _pay(blk["owed"], turn)
                assert (bh, qt) not in written
                written[(bh, qt)] = part if kb == 0 else np.float32(acc[(bh, qt)] + part)
            else:
                acc[(bh, qt)] = part if kb == 0 else np.float32(acc[(bh, qt)] + part)
                _pay(blk["owed"], turn)   # the part before's reduction, complete
                blk["owed"].append(((bh, qt), kb + 1))
        steps += 1
    return {"parts": parts, "written": written, "nqt": nqt}


@pytest.mark.parametrize("BH, T, resident", [(3, 1024, 2), (4, 1000, 3), (2, 65, 1), (5, 7, 2), (12, 512, 5),
                                             (1, 1024, 1), (96, 1024, 132), (128, 1024, 132)])
def test_the_bulk_form_finishes_and_sums_in_key_block_order(BH, T, resident):
    for seed in range(3):
        r = run_schedule(BH, T, resident, np.random.default_rng(seed))
        _assert_sums_in_order(r, BH, lambda qt: range(qt // 2 + 1))   # key blocks 0 .. qt / 2


STAGES = 2   # attention.cu's DKDV_TMA_STAGES: the q/dO ring both consumers of a block read


def run_schedule_split2(BH: int, T: int, resident: int, rng, reverse_tickets: bool = False) -> dict:
    """Split 2 (TR2_ATTN_DQ_BULK=2): no barrier holds a block's two consumers in step, so each has its own walk and
    its own writer; they stay within the ring's STAGES tiles of each other (a stage is refilled once both released
    it), and a third item waits for both to finish the item two before. Writer c adds unit u = 2 kb + c of tile qt when
    the tile's one turn says u; unit 2 (qt // 2) + 1 writes the tile."""
    nqt, order, next_ticket = _tickets(BH, T, resident, reverse_tickets)
    parts, acc, turn, written = {}, {}, {}, {}
    blocks = [{"items": [order[b]], "drawn_all": False, "tile": [0, 0], "done": [0, 0], "released": [0, 0],
               "fifo": [[], []], "owed": [[], []]} for b in range(min(resident, len(order)))]

    def tiles(item):
        return list(range(2 * (item // BH), nqt))

    steps = 0
    while True:
        moves = []
        for bi, blk in enumerate(blocks):
            if not blk["drawn_all"] and len(blk["items"]) - min(blk["done"]) < 2:
                moves.append((bi, "draw", 0))
            for c in (0, 1):
                if blk["done"][c] < len(blk["items"]) and len(blk["fifo"][c]) < BUFFERS \
                        and blk["released"][1 - c] >= blk["released"][c] + 1 - STAGES:
                    moves.append((bi, "compute", c))
                if blk["fifo"][c]:
                    bh, qt, kb = blk["fifo"][c][0]
                    u = 2 * kb + c
                    if u == 0 or turn.get((bh, qt), 0) == u:
                        moves.append((bi, "write", c))
                    elif blk["owed"][c]:
                        moves.append((bi, "pay", c))
                elif blk["owed"][c]:
                    moves.append((bi, "pay", c))
        if not moves:
            busy = [b for b in blocks if any(b["fifo"]) or min(b["done"]) < len(b["items"]) or any(b["owed"])]
            assert not busy, f"deadlock after {steps} steps: {busy}"
            break
        bi, what, c = moves[rng.integers(len(moves))]
        blk = blocks[bi]
        if what == "draw":
            _draw(blk, order, next_ticket)
        elif what == "pay":
            _pay(blk["owed"][c], turn)
        elif what == "compute":
            item = blk["items"][blk["done"][c]]
            kb, bh = item // BH, item % BH
            qt = tiles(item)[blk["tile"][c]]
            parts[(bh, qt, 2 * kb + c)] = np.float32(rng.standard_normal())
            blk["fifo"][c].append((bh, qt, kb))
            blk["released"][c] += 1
            blk["tile"][c] += 1
            if blk["tile"][c] == len(tiles(item)):
                blk["tile"][c], blk["done"][c] = 0, blk["done"][c] + 1
        else:
            bh, qt, kb = blk["fifo"][c].pop(0)
            u = 2 * kb + c
            part = parts[(bh, qt, u)]
            if u == 2 * (qt // 2) + 1:
                _pay(blk["owed"][c], turn)
                assert (bh, qt) not in written
                written[(bh, qt)] = np.float32(acc[(bh, qt)] + part)
            else:
                acc[(bh, qt)] = part if u == 0 else np.float32(acc[(bh, qt)] + part)
                _pay(blk["owed"][c], turn)
                blk["owed"][c].append(((bh, qt), u + 1))
        steps += 1
    return {"parts": parts, "written": written, "nqt": nqt}


@pytest.mark.parametrize("BH, T, resident", [(3, 1024, 2), (4, 1000, 3), (2, 65, 1), (5, 7, 2), (12, 512, 5),
                                             (1, 1024, 1), (96, 1024, 132)])
def test_split_2_finishes_and_sums_in_unit_order(BH, T, resident):
    for seed in range(3):
        r = run_schedule_split2(BH, T, resident, np.random.default_rng(seed))
        _assert_sums_in_order(r, BH, lambda qt: range(2 * (qt // 2) + 2))   # units 0 .. 2 (qt / 2) + 1


def test_the_split_2_model_finds_the_deadlock_of_tickets_handed_out_the_other_way():
    with pytest.raises(AssertionError, match="deadlock"):
        run_schedule_split2(2, 1024, 1, np.random.default_rng(0), reverse_tickets=True)


def test_the_model_finds_the_deadlock_of_tickets_handed_out_the_other_way():
    """Tickets from the last key block down, one block resident: its writer waits on a turn that only a later item
    of its own block could pass: the model says deadlock, so the check above can fail. (The kernel hands the tickets
    out from key block 0 up: an item's writer only waits on items drawn before it.)"""
    with pytest.raises(AssertionError, match="deadlock"):
        run_schedule(2, 1024, 1, np.random.default_rng(0), reverse_tickets=True)


def test_a_writer_that_waits_while_it_owes_a_turn_deadlocks_in_the_model():
    """The rule that makes the owed turn safe, dropped: a writer that pays only after its next part waits for ever at
    the end for a part that will not come, while others wait for its turn."""
    with pytest.raises(AssertionError, match="deadlock"):
        run_schedule(3, 1024, 2, np.random.default_rng(0), pay_when_waiting=False)
