"""input_block.py: the step's inputs as parts of one buffer (the layout, the checks, the NumPy backend's block)."""
from __future__ import annotations

import numpy as np
import pytest

from tr2.cupy_side import input_block
from tr2.cupy_side.backend import get_backend

STEP = [((12, 64), np.int64), ((12, 64), np.int64), ((1,), np.uint64), ((9,), np.float32)]


def test_parts_start_at_multiples_of_align_and_do_not_overlap():
    specs = input_block.normalize(STEP + [((0,), np.float32), ((3, 5), np.float16)])
    offsets, total = input_block.layout(specs)
    ends = [off + int(np.prod(shape)) * dtype.itemsize for (shape, dtype), off in zip(specs, offsets)]
    assert all(off % input_block.ALIGN == 0 for off in offsets) and total % input_block.ALIGN == 0
    assert all(end <= nxt for end, nxt in zip(ends, offsets[1:])) and ends[-1] <= total
    assert offsets[:4] == [0, 6144, 12288, 12800] and total == 13824   # 512-byte units; none for the empty part


def test_views_alias_the_block_and_a_write_sets_every_part():
    block = get_backend("cpu", "float32").input_block(STEP)
    rng = np.random.default_rng(0)
    hosts = [rng.integers(0, 65, (12, 64)), rng.integers(0, 65, (12, 64)), np.array([2**63 + 5], np.uint64),
             rng.standard_normal(9).astype(np.float32)]
    for _ in range(2):   # a second write replaces the first's every part
        block.write(hosts)
        for view, host in zip(block.views, hosts):
            assert view.dtype == host.dtype and np.array_equal(view, host)
            assert np.shares_memory(view, block.block)
        hosts = [h + 1 for h in hosts]
    padding = np.ones(block.nbytes, bool)
    for view in block.views:
        start = view.__array_interface__["data"][0] - block.block.__array_interface__["data"][0]
        padding[start:start + view.nbytes] = False
    assert padding.sum() > 0 and not block.block[padding].any()


def test_a_refused_write_changes_no_part():
    block = get_backend("cpu", "float32").input_block(STEP)
    good = [np.ones((12, 64), np.int64), np.ones((12, 64), np.int64), np.ones(1, np.uint64), np.ones(9, np.float32)]
    with pytest.raises(ValueError, match=r"part 3 given float64\[9\]; allowed: float32\[9\]"):
        block.write(good[:3] + [np.ones(9)])
    with pytest.raises(ValueError, match=r"part 1 given int64\[64, 12\]; allowed: int64\[12, 64\]"):
        block.write([good[0], good[1].T] + good[2:])
    with pytest.raises(ValueError, match="3 arrays for 4 parts; allowed: one a part"):
        block.write(good[:3])
    assert not block.block.any()


@pytest.mark.parametrize("specs, message", [
    ([], "no parts"), ([((2, -1), np.int64)], r"part 0 has shape \(2, -1\); allowed: non-negative sizes"),
    ([((2,), "int65")], r"part 0 is .*allowed: \(shape, dtype\)"), ([(2,)], r"part 0 is .*allowed: \(shape, dtype\)")])
def test_bad_parts_are_refused_by_name(specs, message):
    with pytest.raises(ValueError, match=message):
        input_block.normalize(specs)
