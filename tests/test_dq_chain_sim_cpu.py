"""scripts/probes/dq_chain_sim.py (the chained dQ weighed before it is written) and dq_handoff_probe.py's pure parts,
without a GPU: the tickets are the kernel's own order, the model gives the spans worked out by hand for one head, and
it reports a deadlock where the chain waits on an item no block will ever take."""
import importlib.util
from pathlib import Path

import pytest

_PROBES = Path(__file__).parents[1] / "scripts" / "probes"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, _PROBES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sim = _load("dq_chain_sim")
handoff = _load("dq_handoff_probe")


@pytest.mark.parametrize("BH, nkb, grid", [(96, 8, 132), (128, 8, 132), (36, 8, 132), (5, 3, 7), (1, 1, 1)])
def test_the_grouped_tickets_are_the_kernels_order(over_stand_in_cupy, BH, nkb, grid):
    attention = over_stand_in_cupy("tr2.cupy_side.gpu.attention")
    assert sim.tickets(BH, nkb, grid, "grouped") == [(bh, kb) for kb, bh in attention.grouped_items(BH, nkb, grid)]
    assert sim.tickets(BH, nkb, grid, "kbmajor") == [(bh, kb) for kb in range(nkb) for bh in range(BH)]
    # the chained dQ's kernel takes grouped_rev's order (attention.cu's dkdv_item<2>)
    assert sim.tickets(BH, nkb, grid, "grouped_rev") == [(bh, kb) for kb, bh in attention.chain_items(BH, nkb, grid)]


def test_groups_of_g_heads_lie_between_the_grouped_and_the_key_block_major_tickets():
    """groupsG: G heads a group, key block by key block within it, longest first; G = ceil(grid / nkb) is grouped,
    G at least BH is key-block major."""
    assert sim.tickets(96, 8, 132, "groups17") == sim.tickets(96, 8, 132, "grouped")
    assert sim.tickets(96, 8, 132, "groups96") == sim.tickets(96, 8, 132, "kbmajor")
    assert sim.tickets(5, 2, 7, "groups2") == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0), (2, 1), (3, 1), (4, 0),
                                              (4, 1)]


@pytest.mark.parametrize("S", [1, 8, 16])
def test_the_staggered_tickets_take_each_heads_key_blocks_shortest_first(S):
    """staggerS: every item once; a head's key block kb + 1 ticketed before kb (so the chain's waits are on earlier
    tickets, as grouped_rev's); the heads interleaved."""
    order = sim.tickets(12, 8, 132, f"stagger{S}")
    assert sorted(order) == [(bh, kb) for bh in range(12) for kb in range(8)]
    at = {item: n for n, item in enumerate(order)}
    assert all(at[(bh, kb + 1)] < at[(bh, kb)] for bh in range(12) for kb in range(7))
    assert order[:2] == [(0, 7), (1, 7)]   # ties on the key go to the shorter key block


def test_an_item_runs_its_tiles_with_the_dq_steps_lag_tiles_behind():
    assert sim.item_ops(6, 16, "asc", 1, 0.25) == [("main", 12, 1.0), ("main", 13, 1.0), ("dq", 12, 0.25),
                                                   ("main", 14, 1.0), ("dq", 13, 0.25), ("main", 15, 1.0),
                                                   ("dq", 14, 0.25), ("dq", 15, 0.25)]
    assert sim.item_ops(7, 16, "desc", 0, 0.25) == [("main", 15, 1.0), ("dq", 15, 0.25), ("main", 14, 1.0),
                                                    ("dq", 14, 0.25)]
    assert sim.item_ops(7, 16, "asc", 0, 0.0) == [("main", 14, 1.0), ("main", 15, 1.0)]


def test_the_chains_order():
    # tile 5 sees key blocks 0, 1, 2
    assert [sim.predecessor(kb, 5, "asc") for kb in range(3)] == [None, 0, 1]
    assert [sim.predecessor(kb, 5, "desc") for kb in range(3)] == [1, 2, None]


def test_without_the_chain_the_longest_item_sets_the_span():
    r = sim.simulate(1, 1024, 8, "grouped", "asc", None, 0.0, 0, 0.0)
    assert r["span"] == 16 and r["busy"] == 72 and r["waited"] == 0
    r = sim.simulate(1, 1024, 8, "grouped", "asc", None, 0.25, 0, 0.0)
    assert r["span"] == 20


@pytest.mark.parametrize("latency", [0.0, 1.0, 3.0])
def test_one_head_descending_tiles_ascending_chain_as_worked_by_hand(latency):
    """Descending tiles, the chain in key-block order, no lag: key block kb's j-th dQ step ends at j (1 + d) +
    kb (d + L) (its own step and the one before it in the chain meet there), so the span is the largest of
    (16 - 2 kb)(1 + d) + kb (d + L)."""
    d = 0.25
    r = sim.simulate(1, 1024, 8, "grouped", "desc", "asc", d, 0, latency)
    assert not r["deadlock"]
    assert r["span"] == pytest.approx(max((16 - 2 * kb) * (1 + d) + kb * (d + latency) for kb in range(8)))


def test_a_chain_waiting_on_an_item_no_block_takes_is_a_deadlock():
    # one block: key block 0 holds it, and its dQ steps from tile 2 on wait for key block 1's (descending chain)
    assert sim.simulate(1, 1024, 1, "kbmajor", "asc", "desc", 0.25, 0, 0.0) == {"deadlock": True}
    # the ascending chain waits only on items taken before: it finishes
    assert not sim.simulate(1, 1024, 1, "kbmajor", "asc", "asc", 0.25, 0, 0.0)["deadlock"]


def test_the_handoff_probes_units():
    assert handoff.tiles_per_head() == 72 and handoff.tiles_per_head(2) == 6
    assert handoff.hop_us([4_000_000, 2_000_000, 3_000_000], 1000) == 1.5   # 3 ms / 2000 hops
    assert handoff.TILE_US["gpt2-small"] == pytest.approx(110.37 * 132 / 6912)
    assert "cupy" not in handoff.__dict__
