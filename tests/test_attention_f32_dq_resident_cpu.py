"""attention.cu's resident float32 dQ (attention_backward_dq_wgf_resident, TR2_ATTN_F32_DQ_RESIDENT=1), its schedule
checked on the CPU: the kernel's rules (which stream position lands where, when it is awaited, rounded and read, when
the next item's q and dO land, where the barriers stand), transcribed from its source into a model that runs every
block's items and fails on any hazard:

- a k/v buffer or the q/dO tiles are read (the products S and dPd, k^T's writes from k, D) only when it holds what the read
  expects, rounded, and a block barrier has passed since the rounding (the rounding is each thread's own copies, the
  reads every thread's);
- copies land in a buffer or region only where no read of what it held is still to come;
- a rounding waits on the copies it rounds (cp.async.wait_group 0 with one group in flight, or 1 in the prologue);
- no copy group is left in flight at the kernel's end;
- the tickets: every item done exactly once over all blocks, whatever order the blocks draw in, and both counters
  back at zero after the launch (resident_item / resident_done), so the next launch starts from zero.

The GPU test (tests/test_kernels_gpu.py, float32_dq_resident) holds the kernel's bits to the default kernel's; this one
covers item sequences the card's scheduling may or may not produce. The source lines the model transcribes are asserted
to be in the kernel, so a change there fails here until the model follows it."""
from __future__ import annotations

import random

import pytest

from tr2.cupy_side import gpu

BR, BC = 128, 64
KERNEL_LINES = (
    "const int buf1 = buf == 2 ? 0 : buf + 1, buf2 = buf1 == 2 ? 0 : buf1 + 1;",
    "if (kb < cur.last || next < items) {",
    "round_tile(buf1);",
    "if (kb + 2 <= cur.last) {",
    "land_tile(cur, kb + 2, buf2);",
    "land_tile(decode(next), kb + 1 - cur.last, buf2);",
    "if (kb == cur.last && next < items) {",
    "land_qo(decode(next));",
    "if (n > 0) asm volatile(\"cp.async.wait_group 0;\" ::: \"memory\");",
    "const int next = next_item;",
    "buf = buf1;",
    "it.qb = nqb - 1 - item / BH;",
    "it.last = min(it.qb * BR + BR - 1, T - 1) / BC;",
    'asm volatile("cp.async.wait_group 1;" ::: "memory");',
    'asm volatile("cp.async.wait_group 0;" ::: "memory");',
)

def _kernel_source() -> str:
    src = (gpu.KERNELS_DIR / "attention.cu").read_text()
    start = src.index("__device__ void attention_backward_dq_wgf_resident(")
    return src[start:src.index("\n}\n", start)]


def test_the_model_transcribes_the_kernels_lines():
    src = _kernel_source()
    missing = [line for line in KERNEL_LINES if line not in src]
    assert not missing, f"attention_backward_dq_wgf_resident no longer has {missing}: update this model"


class Hazard(AssertionError):
    pass


class Place:
    """A k/v buffer or a q/dO region: what it holds, whether rounded, whether a barrier has passed since."""

    def __init__(self, name):
        self.name, self.holds, self.rounded, self.published, self.group = name, None, False, False, None
        self.reading = False   # a read (a product in flight, another warpgroup's) not yet past a block barrier

    def land(self, what, group):
        if self.reading:
            raise Hazard(f"{self.name}: {what} landed over {self.holds} while it may still be read")
        self.holds, self.rounded, self.published, self.group = what, False, False, group

    def round(self, what, complete):
        if self.holds != what:
            raise Hazard(f"{self.name}: rounding {what}, holds {self.holds}")
        if self.group not in complete:
            raise Hazard(f"{self.name}: rounding {what} before its copies (group {self.group}) were awaited")
        self.rounded = True

    def read(self, what):
        if self.holds != what or not self.rounded or not self.published:
            raise Hazard(f"{self.name}: read {what}, holds {self.holds} (rounded {self.rounded}, "
                         f"published {self.published})")
        self.reading = True


def _last(item: int, T: int, BH: int) -> int:
    nqb = -(-T // BR)
    qb = nqb - 1 - item // BH
    return min(qb * BR + BR - 1, T - 1) // BC


def run_block(items: list[int], T: int, BH: int) -> list[tuple]:
    """One block's walk over `items` (its blockIdx.x first, then its tickets), as the kernel runs it; returns the
    reads it made, in order, as ("kv", item, tile) and ("qo", item). Raises Hazard."""
    bufs, qo = [Place("kv0"), Place("kv1"), Place("kv2")], Place("qo")
    places = bufs + [qo]
    groups, complete, reads = [], set(), []

    def commit(*landings):
        gid = len(groups)
        groups.append(gid)
        for place, what in landings:
            place.land(what, gid)

    def wait(pending: int):   # cp.async.wait_group pending: all but the newest `pending` groups complete
        for gid in groups[:len(groups) - pending]:
            complete.add(gid)

    def barrier():
        for place in places:
            place.reading = False
            if place.rounded:
                place.published = True

    def read_kv(buf, item, tile):
        bufs[buf].read((item, tile))
        reads.append(("kv", item, tile))

    def read_qo(item):
        qo.read(item)
        reads.append(("qo", item))

    cur = items[0]
    commit((qo, cur), (bufs[0], (cur, 0)))   # q, dO and tile 0
    commit((bufs[1], (cur, 1)))
    wait(1)
    bufs[0].round((cur, 0), complete)
    buf = 0
    for n, cur in enumerate(items):
        last = _last(cur, T, BH)
        assert last >= 1, "every item two key tiles (T > 64)"
        if n > 0:
            wait(0)
        qo.round(cur, complete)
        barrier()   # the item's start; the next item known from here on
        nxt = items[n + 1] if n + 1 < len(items) else None
        read_qo(cur)   # D
        for kb in range(last + 1):
            buf1, buf2 = (buf + 1) % 3, (buf + 2) % 3
            read_qo(cur)           # S and dPd
            read_kv(buf, cur, kb)  # S, dPd and k^T from k
            if kb < last or nxt is not None:   # stage(): the next position awaited and rounded in place
                wait(0)
                bufs[buf1].round((cur, kb + 1) if kb < last else (nxt, 0), complete)
            if kb + 2 <= last:
                commit((bufs[buf2], (cur, kb + 2)))
            elif nxt is not None:
                commit((bufs[buf2], (nxt, kb + 1 - last)))
            barrier()   # the middle one
            if kb == last and nxt is not None:
                commit((qo, nxt))
            barrier()   # the end one (dQ reads k^T only)
            buf = buf1
    in_flight = [gid for gid in groups if gid not in complete]
    if in_flight:
        raise Hazard(f"groups {in_flight} still in flight at the end")
    return reads

def _expected_reads(items, T, BH):
    out = []
    for item in items:
        out.append(("qo", item))
        for kb in range(_last(item, T, BH) + 1):
            out += [("qo", item), ("kv", item, kb)]
    return out


@pytest.mark.parametrize("T", [65, 127, 128, 129, 192, 256, 1000, 1024])
@pytest.mark.parametrize("BH", [1, 2, 5])
def test_one_block_walking_every_item_reads_each_tile_staged_and_nothing_stale(T, BH):
    """One block (the test's blocks=1 on the GPU): the items in ticket order, longest rows first."""
    items = list(range(-(-T // BR) * BH))
    assert run_block(items, T, BH) == _expected_reads(items, T, BH)


def test_any_item_order_is_hazard_free():
    """The blocks draw in whatever order the card runs them: random subsequences of items, any lengths mixed."""
    rnd = random.Random(11)
    for _ in range(300):
        T, BH = rnd.choice([65, 129, 200, 256, 1000, 1024]), rnd.randint(1, 6)
        n = -(-T // BR) * BH
        items = rnd.sample(range(n), rnd.randint(1, n))
        assert run_block(items, T, BH) == _expected_reads(items, T, BH)


def test_the_model_catches_a_schedule_off_by_one():
    """The checker can fail: landing over a buffer before its reads, or while they may be in flight, or rounding
    before the copies were awaited."""
    buf = Place("kv0")
    buf.land(("i", 0), 0)
    buf.round(("i", 0), {0})
    buf.published = True
    buf.read(("i", 0))
    with pytest.raises(Hazard, match="may still be read"):
        buf.land(("i", 3), 1)   # no block barrier since the read
    buf.reading = False
    buf.land(("i", 3), 1)
    with pytest.raises(Hazard, match="read"):
        buf.read(("i", 0))
    with pytest.raises(Hazard, match="before its copies"):
        buf.round(("i", 3), {0})


def _tickets(grid: int, items: int, rnd: random.Random) -> tuple[list[list[int]], list[int]]:
    """resident_item / resident_done over `grid` blocks stepping in a random order: each block's items, and sched
    after the launch. A block draws ticket n + 1 at its item n's start, and counts itself done once a ticket is past
    the items; the last to count zeroes both counters."""
    sched = [0, 0]
    walks = [[b] for b in range(grid)]
    live = list(range(grid))
    while live:
        b = rnd.choice(live)
        nxt = grid + sched[0]
        sched[0] += 1
        if nxt >= items:
            sched[1] += 1
            if sched[1] == grid:
                sched[0] = sched[1] = 0
            live.remove(b)
        else:
            walks[b].append(nxt)
    return walks, sched


@pytest.mark.parametrize("grid, items", [(1, 1), (1, 16), (5, 16), (16, 16), (132, 288), (132, 256), (7, 8)])
def test_the_tickets_hand_out_every_item_once_and_end_at_zero(grid, items):
    rnd = random.Random(grid * 1000 + items)
    for _ in range(20):
        walks, sched = _tickets(grid, items, rnd)
        done = sorted(i for walk in walks for i in walk)
        assert done == list(range(items)) and sched == [0, 0]
