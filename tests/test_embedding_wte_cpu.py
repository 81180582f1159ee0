"""embedding.cu's embedding_backward_wte, checked without a GPU: its segments, piece ends, partial slots, arrival
counts and combine transcribed to NumPy (float32 adds in the kernel's order), against ops/embedding.py's reference,
with the blocks run in shuffled orders: the bits must not depend on which block finishes last. Segments smaller
than the kernel's put many edges into small inputs. test_kernels_gpu.py holds the kernel to this form bit for bit."""
import numpy as np
import pytest

from tr2.cupy_side import gpu
from tr2.cupy_side.ops import embedding as ref

WTE_SEG = gpu.kernel_define("embedding.cu", "WTE_SEG")
WTE_THREADS = 128   # gpu/embedding.py's (that module needs CuPy)


def counting_sort(idx, V):
    """What embedding_sort_* leave: the rows stably sorted by token, and each token's first sorted position."""
    return np.argsort(idx, kind="stable"), np.r_[0, np.cumsum(np.bincount(idx, minlength=V))]


def wte_backward(dout, idx, dwte, seg=WTE_SEG, threads=WTE_THREADS, block_order=None, add=True):
    """dwte[V, C] float32 += embedding_backward_wte's sums of dout[N, C] float32, in place. The (segment, channel
    slice) blocks run whole, one after another, in block_order (default: grid order). add=False:
    embedding_backward_wte_sums, which writes each present token's sum alone (dwte[v] = sum)."""
    N, C = dout.shape
    rows, starts = counting_sort(idx, dwte.shape[0])
    S, Y = -(-N // seg), -(-C // threads)
    part = np.full((S, 2, C), np.nan, np.float32)   # a slot read before it is written poisons the result
    arrived = np.zeros(S * Y, np.int64)
    for b in range(S * Y) if block_order is None else block_order:
        s, y = divmod(int(b), Y)
        k0, cs = s * seg, slice(y * threads, min(C, (y + 1) * threads))
        n = min(seg, N - k0)
        tok = idx[rows[k0:k0 + n]]
        lo, hi = starts[tok], starts[tok + 1]
        r = np.arange(n)
        end = (k0 + r + 1 == hi) | (r == n - 1)
        whole = end & (lo >= k0) & (hi <= k0 + n)
        second = end & (lo > k0) & (hi > k0 + n)
        cross = [(tok[0], lo[0], hi[0]) if lo[0] < k0 or hi[0] > k0 + n else None,
                 (tok[-1], lo[-1], hi[-1]) if lo[-1] > k0 and hi[-1] > k0 + n else None]
        acc = np.zeros(cs.stop - cs.start, np.float32)
        for i in range(n):
            acc = acc + dout[rows[k0 + i], cs]
            if end[i]:
                if whole[i]:
                    dwte[tok[i], cs] = dwte[tok[i], cs] + acc if add else acc
                else:
                    part[s, int(second[i]), cs] = acc
                acc = np.zeros_like(acc)
        last = []   # both arrivals are counted before either combine
        for run in cross:
            if run is not None:
                sa, sb = run[1] // seg, (run[2] - 1) // seg
                arrived[sb * Y + y] += 1
                if arrived[sb * Y + y] == sb - sa + 1:
                    last.append(run)
        for v, lo_v, hi_v in last:
            sa, sb = lo_v // seg, (hi_v - 1) // seg
            total = part[sa, int(lo_v > sa * seg), cs]
            for q in range(sa + 1, sb + 1):
                total = total + part[q, 0, cs]
            dwte[v, cs] = dwte[v, cs] + total if add else total
    return arrived


def tokens(kind, N, seg, g):
    """(idx, V) for the cases named in the test."""
    if kind == "one token":       # a single run across every segment
        return np.full(N, 3), 5
    if kind == "all distinct":    # every row its own token: no run crosses an edge
        return g.permutation(N), N
    if kind == "on the edges":    # every run starts and ends on a segment edge
        counts = seg * g.integers(1, 4, size=max(1, N // (2 * seg)))   # N: about
        return g.permutation(np.repeat(np.arange(len(counts)), counts)), len(counts)
    if kind == "zipf":            # a few long runs among many short ones, as with real text
        return np.minimum(g.zipf(1.3, size=N), 400) - 1, 400
    return g.integers(0, 7, size=N), 9   # "few tokens": runs of ~N / 7


CASES = [  # kind, N, C, seg, threads
    ("one token", 300, 9, 32, 4), ("one token", 300, 9, 4, 128), ("one token", 1, 3, 32, 128),
    ("all distinct", 203, 7, 8, 4), ("on the edges", 256, 6, 8, 4), ("on the edges", 256, 130, 32, 128),
    ("few tokens", 203, 7, 4, 4), ("few tokens", 1000, 130, 32, 128), ("few tokens", 33, 5, 32, 2),
    ("zipf", 999, 11, 8, 4), ("zipf", 2048, 40, 32, 16),
]


@pytest.mark.parametrize("kind, N, C, seg, threads", CASES)
def test_wte_model_matches_the_reference_in_any_block_order(kind, N, C, seg, threads):
    g = np.random.default_rng(N * C + seg)
    idx, V = tokens(kind, N, seg, g)
    N = len(idx)
    dout = g.standard_normal((N, C)).astype(np.float32)
    dwte0 = g.standard_normal((V, C)).astype(np.float32)
    want, want_pe = dwte0.astype(np.float64), np.zeros((N, C))
    ref.backward(dout.astype(np.float64).reshape(1, N, C), idx.reshape(1, N), want, want_pe)
    blocks = -(-N // seg) * -(-C // threads)
    outs = []
    for order in (None, g.permutation(blocks), g.permutation(blocks)[::-1]):
        got = dwte0.copy()
        arrived = wte_backward(dout, idx, got, seg, threads, order)
        outs.append(got)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
        # each run crossing an edge was counted once in each of its segments, at its last segment
        _, starts = counting_sort(idx, V)
        lo, hi = starts[:-1], starts[1:]
        crossing = (hi > lo) & (lo // seg != (hi - 1) // seg)
        expect = np.zeros(-(-N // seg), np.int64)
        expect[(hi[crossing] - 1) // seg] = (hi[crossing] - 1) // seg - lo[crossing] // seg + 1
        assert (arrived.reshape(-1, -(-C // threads)) == expect[:, None]).all()
    for got in outs[1:]:
        assert np.array_equal(got, outs[0])   # the same bits whichever block came last


@pytest.mark.parametrize("seg", [2, WTE_SEG])
def test_wte_model_adds_a_runs_partials_in_segment_order(seg):
    """One run over three segments whose sums are 1, 2^24 and -2^24 (float32: 1 + 2^24 rounds to 2^24): in segment
    order the partials give 0, from the last segment back 1; then dwte's own value is added, not the partials."""
    dout = np.zeros((3 * seg, 1), np.float32)
    dout[[0, seg, 2 * seg], 0] = 1.0, 2.0 ** 24, -2.0 ** 24
    dwte = np.full((1, 1), 0.5, np.float32)
    wte_backward(dout, np.zeros(3 * seg, np.int64), dwte, seg, 1)
    assert dwte[0, 0] == 0.5


# ---- the tied wte's gradient held as lm_head's dW and the sums (embedding_backward_wte_sums, common.cuh's TiedRows) ----
def tied_value(dw_f32, sums, starts):
    """What the global norm and AdamW read for the tied wte (TiedRows::add): dW widened, plus the row's sum where
    its token is present (starts[v + 1] > starts[v]), one float32 add; dW alone elsewhere."""
    present = (starts[1:] > starts[:-1])[:, None]
    return np.where(present, dw_f32 + sums, dw_f32)


@pytest.mark.parametrize("kind, N, C, seg, threads", CASES)
def test_the_sums_and_their_readers_give_the_widened_gradients_bits(kind, N, C, seg, threads):
    """embedding_backward_wte into the widened dW against embedding_backward_wte_sums then the readers' add: the same
    float32 bits on every row, present or not, in any block order. dW is bfloat16 values (lm_head's product under
    half roundings); the sums' rows of absent tokens hold NaN, which no reader may take."""
    g = np.random.default_rng(7 * N + C + seg)
    idx, V = tokens(kind, N, seg, g)
    N = len(idx)
    V += 3   # rows no token reaches, as the classifier's padding rows
    dout = g.standard_normal((N, C)).astype(np.float32)
    dw = (g.standard_normal((V, C)).astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)   # bf16 values
    want = dw.copy()
    wte_backward(dout, idx, want, seg, threads)
    _, starts = counting_sort(idx, V)
    blocks = -(-N // seg) * -(-C // threads)
    for order in (None, g.permutation(blocks)):
        sums = np.full((V, C), np.nan, np.float32)
        wte_backward(dout, idx, sums, seg, threads, order, add=False)
        got = tied_value(dw, sums, starts)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def row_walk(first, step, C, count):
    """common.cuh's RowWalk: the row of first, first + step, ... (count of them) by one division, then subtractions."""
    v, r, out = first // C, first % C, []
    for _ in range(count):
        out.append(v)
        r += step
        while r >= C:
            r -= C
            v += 1
    return out


@pytest.mark.parametrize("C", [1, 4, 65, 384, 768, 1024, 1000])
@pytest.mark.parametrize("step", [1, 256, 1024])
def test_the_readers_row_walk_is_the_row_of_each_index(C, step):
    for first in (0, 3, C - 1, C, 4096 * 7 + 5):
        assert row_walk(first, step, C, 40) == [(first + k * step) // C for k in range(40)]


# ---- embedding_sort_scan: rounds of threads x run tokens, each thread's run scanned, then the block's run sums ----
def sort_scan(total, threads, run):
    """starts[V + 1] as embedding_sort_scan computes them: a round's tokens first..first + threads run - 1 (zeros
    past V), thread t's run the tokens first + t run.., the runs' exclusive scan plus the rounds before (carry);
    rounds up to the one holding token V. Positions no round writes stay -1."""
    V = len(total)
    starts = np.full(V + 1, -1, np.int64)
    carry, first = 0, 0
    while first <= V:
        tok = first + np.arange(threads * run)
        counts = np.where(tok < V, total[np.minimum(tok, V - 1)], 0).reshape(threads, run)
        within = np.cumsum(counts, axis=1) - counts                       # each run's exclusive scan
        sums = counts.sum(axis=1)
        out = (carry + (np.cumsum(sums) - sums))[:, None] + within       # the block's scan of the run sums
        keep = tok <= V
        starts[tok[keep]] = out.reshape(-1)[keep]
        carry += int(sums.sum())
        first += threads * run
    return starts


SCAN_THREADS = gpu.kernel_define("embedding.cu", "SCAN_THREADS")
SCAN_RUN = gpu.kernel_define("embedding.cu", "SCAN_RUN")


@pytest.mark.parametrize("V", [1, 2, 65, SCAN_THREADS * SCAN_RUN - 1, SCAN_THREADS * SCAN_RUN,
                               SCAN_THREADS * SCAN_RUN + 1, 50257, 50304])
@pytest.mark.parametrize("threads, run", [(SCAN_THREADS, SCAN_RUN), (4, 3)])
def test_the_scans_rounds_give_every_start(V, threads, run):
    """Every token's start and starts[V] = N, for vocabularies ending inside a round, on its last token and one
    past it (token V alone in a round of its own), with long runs of absent tokens among a few heavy ones."""
    g = np.random.default_rng(V + threads)
    total = np.where(g.random(V) < 0.05, g.integers(1, 2000, size=V), 0)
    total[g.integers(0, V)] += 100000
    want = np.r_[0, np.cumsum(total)]
    np.testing.assert_array_equal(sort_scan(total, threads, run), want)
