"""The chained dQ's protocol (attention.cu's chain_turn and dkdv_item<2>, TR2_ATTN_DQ_CHAIN_ASC=0; chain_turn_asc and
dkdv_item<0>, TR2_ATTN_DQ_CHAIN_ASC=1, the default), played out without a
GPU: blocks take items by tickets as the resident kernel does (the first by blockIdx.x, then the producer draws the
next ticket while the consumers work on the current item, the worst case for a deadlock), and each item's warpgroups
take their turns for its query tiles with the kernel's counter values, in random interleavings. What must hold: no
schedule deadlocks, every turn finds the running sum its counter promises, and each query tile's dQ is written once,
by key block 0's warpgroup 0, with its 64-key parts added keys descending (qt, qt - 1, .., 0): the fixed order whose
bits the GPU test asks to repeat. The rules below are chain_turn's, transcribed; a change there must change them."""
import functools
import importlib.util
import random
from pathlib import Path

import pytest


_SIM = Path(__file__).parents[1] / "scripts" / "probes" / "dq_chain_sim.py"
_spec = importlib.util.spec_from_file_location("dq_chain_sim", _SIM)
sim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sim)


@pytest.fixture
def chain_items(over_stand_in_cupy):
    """The kernel's ticket order as gpu/attention.py mirrors it (dkdv_item<2>): (key block, head) a ticket."""
    return over_stand_in_cupy("tr2.cupy_side.gpu.attention").chain_items


@functools.lru_cache(maxsize=None)
def item_turns(kb: int, nqt: int, first: int = 1) -> tuple:
    """An item's turns in its consumers' order: for each query tile from its diagonal, warpgroup `first`'s and the
    other's, warpgroup 1's only where its keys are not all after the tile's queries (qt >= 2 kb + 1). chain_turn:
    warpgroup 1 first; chain_turn_asc: warpgroup 0."""
    turns = []
    for qt in range(2 * kb, nqt):
        for cw in (first, 1 - first):
            if cw == 0 or qt >= 2 * kb + 1:
                turns.append((cw, qt))
    return tuple(turns)


class Descending:
    """chain_turn's rules, transcribed: tile qt's parts keys descending (qt, qt - 1, .., 0)."""
    first = 1

    @staticmethod
    def waits(cw: int, j: int, qt: int, count: int) -> bool:
        # warpgroup 1 waits for qt - j parts unless it starts the sum (j == qt)
        return cw == 1 and j < qt and count != qt - j

    @staticmethod
    def take(i, kb, bh, cw, qt, slot, hand, counter, written) -> list:
        j = 2 * kb + cw
        if cw == 1:
            running = [j] if j == qt else slot.pop((bh, qt)) + [j]
            hand[i] = running
        else:
            running = (hand.pop(i) if j < qt else []) + [j]
            if kb == 0:
                assert (bh, qt) not in written
                written[(bh, qt)] = running
            else:
                slot[(bh, qt)] = running
                counter[(bh, qt)] = qt - j + 1   # chain_turn's st_release
        return running

    @staticmethod
    def summed(qt: int, j: int) -> list:
        return list(range(qt, j - 1, -1))


class Ascending:
    """chain_turn_asc's rules, transcribed: tile qt's parts keys ascending (0, 1, .., qt)."""
    first = 0

    @staticmethod
    def waits(cw: int, j: int, qt: int, count: int) -> bool:
        # warpgroup 0 waits for j parts unless it holds key 0
        return cw == 0 and j > 0 and count != j

    @staticmethod
    def take(i, kb, bh, cw, qt, slot, hand, counter, written) -> list:
        j = 2 * kb + cw
        running = ((slot.pop((bh, qt)) if j > 0 else []) if cw == 0 else hand.pop(i)) + [j]
        if j == qt:   # the diagonal: the last part
            assert (bh, qt) not in written
            written[(bh, qt)] = running
        elif cw == 0:
            hand[i] = running
        else:
            slot[(bh, qt)] = running
            counter[(bh, qt)] = j + 1   # chain_turn_asc's st_release
        return running

    @staticmethod
    def summed(qt: int, j: int) -> list:
        return list(range(j + 1))


def play(T: int, BH: int, grid: int, rng: random.Random, order, rules=Descending) -> dict:
    """One random schedule of the items in `order`'s tickets under `rules`: {(bh, qt): the parts of the written dQ,
    in the order added}; raises on a deadlock, a turn finding another sum than its counter promises, or a tile
    written twice."""
    nkb, nqt = -(-T // 128), -(-T // 64)
    tickets = order(BH, nkb, grid)
    grid = min(grid, len(tickets))
    counter = {(bh, qt): 0 for bh in range(BH) for qt in range(nqt)}   # zeroed by the row dots
    slot = {}                                                          # dq_acc: the running sums
    hand = {}                                                          # a block's handoff buffer
    written = {}
    nxt = grid
    blocks = []
    for b in range(grid):   # [items held (current first), turn index in the current]
        blocks.append([[tickets[b]], 0])

    def draw(block):
        nonlocal nxt
        if nxt < len(tickets):
            block[0].append(tickets[nxt])
            nxt += 1

    for b in blocks:
        draw(b)   # the producer's prefetch while the first item runs
    while any(b[0] for b in blocks):
        ready = []
        for i, (held, k) in enumerate(blocks):
            if not held:
                continue
            kb, bh = held[0]
            cw, qt = item_turns(kb, nqt, rules.first)[k]
            if not rules.waits(cw, 2 * kb + cw, qt, counter[(bh, qt)]):
                ready.append(i)
        if not ready:
            raise AssertionError(f"deadlock: {[(b[0][:1], b[1]) for b in blocks if b[0]]}")
        i = rng.choice(ready)
        held, k = blocks[i]
        kb, bh = held[0]
        cw, qt = item_turns(kb, nqt, rules.first)[k]
        running = rules.take(i, kb, bh, cw, qt, slot, hand, counter, written)
        assert running == rules.summed(qt, 2 * kb + cw), (bh, qt, 2 * kb + cw, running)
        blocks[i][1] += 1
        if blocks[i][1] == len(item_turns(kb, nqt, rules.first)):   # the item is done: the next one starts
            held.pop(0)
            blocks[i][1] = 0
            if held:
                draw(blocks[i])
    assert not slot and not hand
    return written


def key_block_major(BH: int, nkb: int, grid: int) -> list:
    """dkdv_item<0>'s tickets, transcribed (kb = item / BH, bh = item % BH): the ascending chain's order."""
    return [(item // BH, item % BH) for item in range(BH * nkb)]


@pytest.mark.parametrize("T, BH, grid", [(1024, 96, 132), (1024, 8, 5), (1000, 6, 4), (257, 3, 2), (1024, 3, 1),
                                         (320, 5, 3), (1024, 40, 33), (256, 384, 132), (127, 6, 4), (7, 3, 2),
                                         (1, 2, 2), (192, 5, 3), (1024, 1, 1)])
def test_the_ascending_chain_finishes_and_sums_each_tile_keys_ascending(T, BH, grid):
    """TR2_ATTN_DQ_CHAIN_ASC's protocol on ORDER 0's tickets (key block by key block, the longest first): no schedule
    deadlocks (a turn waits on key block kb - 1, an earlier ticket, so the earliest unfinished ticket is always some
    block's current item and free to go), each tile written once, its parts keys ascending (0, 1, .., qt). It is
    dq_chain_sim's kbmajor order."""
    nkb, nqt = -(-T // 128), -(-T // 64)
    assert key_block_major(BH, nkb, grid) == [(kb, bh) for bh, kb in sim.tickets(BH, nkb, grid, "kbmajor")]
    for seed in range(4):
        written = play(T, BH, grid, random.Random(seed), key_block_major, Ascending)
        assert sorted(written) == [(bh, qt) for bh in range(BH) for qt in range(nqt)]
        assert all(parts == list(range(qt + 1)) for (bh, qt), parts in written.items())


def test_the_ascending_chain_on_the_grouped_shortest_first_tickets_deadlocks(chain_items):
    """Why ORDER 0 and not the descending chain's tickets: there a turn waits on key block kb - 1, a later ticket, and
    one block holding the shortest key block and prefetching the next waits forever."""
    with pytest.raises(AssertionError, match="^deadlock"):
        play(1024, 1, 1, random.Random(0), chain_items, Ascending)


@pytest.mark.parametrize("T, BH, grid", [(1024, 96, 132), (1024, 8, 5), (1000, 6, 4), (257, 3, 2), (1024, 3, 1),
                                         (320, 5, 3), (1024, 40, 33), (256, 384, 132), (127, 6, 4), (7, 3, 2),
                                         (1, 2, 2), (192, 5, 3)])
def test_every_schedule_finishes_and_sums_each_tile_keys_descending(chain_items, T, BH, grid):
    nqt = -(-T // 64)
    for seed in range(4):
        written = play(T, BH, grid, random.Random(seed), chain_items)
        assert sorted(written) == [(bh, qt) for bh in range(BH) for qt in range(nqt)]
        assert all(parts == list(range(qt, -1, -1)) for (bh, qt), parts in written.items())


def test_a_key_block_ascending_ticket_order_can_deadlock(chain_items):
    """Why the shortest key blocks go first: with the longest first (ORDER 1's tickets), one block holding key block 0
    and the producer's prefetch of key block 1 behind it waits forever on its own next item."""
    def longest_first(BH, nkb, grid):
        return [(nkb - 1 - kb, bh) for kb, bh in chain_items(BH, nkb, grid)]
    with pytest.raises(AssertionError, match="^deadlock"):
        play(1024, 1, 1, random.Random(0), longest_first)
