"""attention.cu's blocking, checked without a GPU: the fragment addresses its ldmatrix loads give each lane,
against the mma fragment layout; and its loops (blocks of 4 * 16 * MT rows, streamed tiles, the first and
last tile of each block, the tiles a warp skips, the tiles that need the causal mask) transcribed to NumPy
with the geometry read from the source, against dense attention for T around every edge."""
import re

import numpy as np
import pytest

from tr2.cupy_side import gpu

NWARPS = 4
LD = 72   # a staged half row, padded


# ---- ldmatrix and the mma m16n8k16 layout (PTX ISA): lanes 8q..8q+7 address the rows of matrix q; lane l
# receives row l // 4, columns 2 (l % 4), +1 of each matrix (.trans: the transposed matrix) ----
def ldmatrix_x4(tile, address_of_lane, trans=False):
    out = np.zeros((32, 4, 2), dtype=tile.dtype)
    for q in range(4):
        m = np.array([tile[r, c:c + 8] for r, c in (address_of_lane(8 * q + i) for i in range(8))])
        m = m.T if trans else m
        for lane in range(32):
            out[lane, q] = m[lane // 4, 2 * (lane % 4):2 * (lane % 4) + 2]
    return out


def a_fragment(get, m0):
    """Registers a0..a3 of each lane: (row g, k 2t..), (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..)."""
    return np.array([[[get(m0 + ln // 4 + dr, 2 * (ln % 4) + dk + e) for e in (0, 1)]
                      for dr, dk in ((0, 0), (8, 0), (0, 8), (8, 8))] for ln in range(32)])


def b_fragment(get, n0):
    """Registers b0, b1 of each lane for B[k][n] = get(k, n): (k 2t.., n g), (k 2t + 8.., n g)."""
    return np.array([[[get(2 * (ln % 4) + dk + e, n0 + ln // 4) for e in (0, 1)] for dk in (0, 8)] for ln in range(32)])


@pytest.mark.parametrize("k16", [0, 1, 3])
@pytest.mark.parametrize("r0", [0, 16, 48])
def test_fragment_addresses(k16, r0):
    tile = np.arange(128 * LD).reshape(128, LD)
    # load_a: rows r0 + (lane & 15), columns k16 * 16 + (lane >> 4) * 8
    got = ldmatrix_x4(tile, lambda ln: (r0 + (ln & 15), k16 * 16 + (ln >> 4) * 8))
    assert (got == a_fragment(lambda r, k: tile[r, k16 * 16 + k], r0)).all()
    # load_b_rows (B[k][n] = tile[n][k]): rows n0 + (lane & 7) + ((lane >> 4) << 3), columns + ((lane >> 3) & 1) * 8
    got = ldmatrix_x4(tile, lambda ln: (r0 + (ln & 7) + ((ln >> 4) << 3), k16 * 16 + ((ln >> 3) & 1) * 8))
    for q in (0, 1):
        assert (got[:, 2 * q:2 * q + 2] == b_fragment(lambda k, n: tile[n, k16 * 16 + k], r0 + 8 * q)).all()
    # load_b_cols (B[k][n] = tile[k][n], transposed): rows k16 * 16 + (lane & 15), columns n0 + (lane >> 4) * 8
    got = ldmatrix_x4(tile, lambda ln: (k16 * 16 + (ln & 15), r0 + (ln >> 4) * 8), trans=True)
    for q in (0, 1):
        assert (got[:, 2 * q:2 * q + 2] == b_fragment(lambda k, n: tile[k16 * 16 + k, n], r0 + 8 * q)).all()
    # load_a_trans (A[m][k] = tile[k][m], the backward's dS^T read as dS): rows k16 * 16 + (lane & 7) +
    # ((lane >> 4) << 3), columns m0 + ((lane >> 3) & 1) * 8, transposed
    got = ldmatrix_x4(tile, lambda ln: (k16 * 16 + (ln & 7) + ((ln >> 4) << 3), r0 + ((ln >> 3) & 1) * 8), trans=True)
    assert (got == a_fragment(lambda m, k: tile[k16 * 16 + k, m], r0)).all()


def stmatrix_x4(smem, address_of_lane, regs):
    """stmatrix .x4 (PTX ISA): lanes 8q..8q+7 address the rows of matrix q; lane l's register q holds that
    matrix's row l // 4, columns 2 (l % 4), +1."""
    for q in range(4):
        for i in range(8):
            r, c = address_of_lane(8 * q + i)
            for lane in range(4 * i, 4 * i + 4):
                smem[r, c + 2 * (lane % 4):c + 2 * (lane % 4) + 2] = regs[lane][q]


@pytest.mark.parametrize("mt_count", [1, 2])
def test_store_ds_t_writes_each_c_register_to_its_row_and_column(mt_count):
    """attention.cu's store_ds_t: a warp's C registers of dS^T (register (mt, n, e) of lane l: key
    16 mt + l // 4 + 8 (e >> 1), query 8 n + 2 (l % 4) + (e & 1)) through stmatrix into the warp's staged rows
    (LDS = 40 halves), read back 16 bytes a lane (row k * 8 + l // 4, piece l % 4), land where the key's row and the
    query's column are."""
    nt, lds = 4, 40
    rows = 16 * mt_count
    value = np.arange(rows * 8 * nt).reshape(rows, 8 * nt)   # dS^T[key][query], the block's
    c = {(ln, mt, n, e): value[16 * mt + ln // 4 + 8 * (e >> 1), 8 * n + 2 * (ln % 4) + (e & 1)]
         for ln in range(32) for mt in range(mt_count) for n in range(nt) for e in range(4)}
    smem = np.full((rows, lds), -1)
    for mt in range(mt_count):
        for r in range(2):
            regs = [[(c[ln, mt, n, 2 * r], c[ln, mt, n, 2 * r + 1]) for n in range(nt)] for ln in range(32)]
            stmatrix_x4(smem, lambda ln: (16 * mt + 8 * r + (ln & 7), (ln >> 3) * 8), regs)
    out = np.full((rows, 8 * nt), -1)
    pieces = nt * 8 // 8
    for k in range(16 * mt_count * pieces // 32):
        for ln in range(32):
            row, col = k * (32 // pieces) + ln // pieces, (ln % pieces) * 8
            out[row, col:col + 8] = smem[row, col:col + 8]
    assert (out == value).all()


# ---- the loops ----
def dense(q, k, v, do, scale):
    T = q.shape[0]
    s = q @ k.T * scale
    s[np.triu_indices(T, 1)] = -np.inf
    lse = np.log(np.exp(s - s.max(1, keepdims=True)).sum(1)) + s.max(1)
    P = np.exp(s - lse[:, None])
    o = P @ v
    D = (do * o).sum(1)
    dS = P * (do @ v.T - D[:, None])
    return o, lse, D, dS @ k * scale, dS.T @ q * scale, P.T @ do


def padded(a, n):
    return np.vstack([a, np.zeros((n - a.shape[0], a.shape[1]))])


def forward(q, k, v, scale, mt, bc):
    T, hs = q.shape
    rw, br = 16 * mt, NWARPS * 16 * mt
    nqb, c = -(-T // br), scale * np.log2(np.e)
    Q, K, V = padded(q, nqb * br), padded(k, (T // bc + 1) * bc), padded(v, (T // bc + 1) * bc)
    o, lse = np.full((T, hs), np.nan), np.full(T, np.nan)
    for qb in range(nqb):
        last = min(qb * br + br - 1, T - 1) // bc
        for w in range(NWARPS):
            r0 = qb * br + w * rw
            rows = np.arange(r0, r0 + rw)
            m, lsum, acc = np.full(rw, -np.inf), np.zeros(rw), np.zeros((rw, hs))
            for kb in range(last + 1):
                if kb * bc > r0 + rw - 1:   # the warp skips the tile
                    continue
                cols = np.arange(kb * bc, kb * bc + bc)
                s = Q[rows] @ K[cols].T
                if kb * bc + bc - 1 > r0 or kb * bc + bc > T:   # only these tiles are masked
                    s[(cols[None, :] > rows[:, None]) | (cols[None, :] >= T)] = -np.inf
                mnew = np.maximum(m, s.max(1))
                mc = np.where(mnew == -np.inf, 0.0, mnew * c)
                alpha = np.exp2(m * c - mc)
                p = np.exp2(s * c - mc[:, None])
                m, lsum, acc = mnew, lsum * alpha + p.sum(1), acc * alpha[:, None] + p @ V[cols]
            keep = rows < T
            o[rows[keep]] = acc[keep] / lsum[keep, None]
            lse[rows[keep]] = (m * scale + np.log(lsum))[keep]
    return o, lse


def backward_dq(q, k, v, do, lse, D, scale, mt, bc):
    T, hs = q.shape
    rw, br = 16 * mt, NWARPS * 16 * mt
    nqb, c = -(-T // br), scale * np.log2(np.e)
    Q, dO = padded(q, nqb * br), padded(do, nqb * br)
    K, V = padded(k, (T // bc + 1) * bc), padded(v, (T // bc + 1) * bc)
    Lc, Dp = np.append(lse * np.log2(np.e), np.zeros(nqb * br - T)), np.append(D, np.zeros(nqb * br - T))
    dq = np.full((T, hs), np.nan)
    for qb in range(nqb):
        last = min(qb * br + br - 1, T - 1) // bc
        for w in range(NWARPS):
            r0 = qb * br + w * rw
            rows, acc = np.arange(r0, r0 + rw), np.zeros((rw, hs))
            for kb in range(last + 1):
                if kb * bc > r0 + rw - 1:
                    continue
                cols = np.arange(kb * bc, kb * bc + bc)
                p = np.exp2(Q[rows] @ K[cols].T * c - Lc[rows][:, None])
                if kb * bc + bc - 1 > r0 or kb * bc + bc > T:
                    p[~((cols[None, :] <= rows[:, None]) & (rows[:, None] < T) & (cols[None, :] < T))] = 0.0
                acc += (p * (dO[rows] @ V[cols].T - Dp[rows][:, None])) @ K[cols]
            keep = rows < T
            dq[rows[keep]] = acc[keep] * scale
    return dq


def backward_dkdv(q, k, v, do, lse, D, scale, mt, bc, ds_t=None):
    """ds_t [T, ldq] given: each warp's dS^T rows of the tiles it computes are written there too (DS)."""
    T, hs = q.shape
    rw, br = 16 * mt, NWARPS * 16 * mt
    nkb, nqt, c = -(-T // br), -(-T // bc), scale * np.log2(np.e)
    K, V, Q, dO = padded(k, nkb * br), padded(v, nkb * br), padded(q, nqt * bc), padded(do, nqt * bc)
    Lc, Dp = np.append(lse * np.log2(np.e), np.zeros(nqt * bc - T)), np.append(D, np.zeros(nqt * bc - T))
    dk, dv = np.full((T, hs), np.nan), np.full((T, hs), np.nan)
    for kb in range(nkb):
        for w in range(NWARPS):
            k0 = kb * br + w * rw
            keys, ak, av = np.arange(k0, k0 + rw), np.zeros((rw, hs)), np.zeros((rw, hs))
            for qt in range((kb * br) // bc, nqt):
                if qt * bc + bc - 1 < k0:
                    continue
                qs = np.arange(qt * bc, qt * bc + bc)
                p = np.exp2(K[keys] @ Q[qs].T * c - Lc[qs][None, :])
                if qt * bc < k0 + rw - 1 or qt * bc + bc > T:
                    p[~((keys[:, None] <= qs[None, :]) & (qs[None, :] < T) & (keys[:, None] < T))] = 0.0
                av += p @ dO[qs]
                ds = p * (V[keys] @ dO[qs].T - Dp[qs][None, :])
                ak += ds @ Q[qs]
                if ds_t is not None:
                    ds_t[keys[keys < T], qt * bc:qt * bc + bc] = ds[keys < T]
            keep = keys < T
            dk[keys[keep]], dv[keys[keep]] = ak[keep] * scale, av[keep]
    return dk, dv


def backward_fused(q, k, v, do, lse, D, scale, mt, bc):
    """The half builds' one backward kernel: backward_dkdv's loop with the query tiles from the last down,
    each block's part of a tile's dQ (dS over the block's keys up to the tile's last query, times k) added
    to what the blocks before it left, in key-block order; the tile's last key block scales and writes it.
    `order` records which key blocks added to each tile, in their order, for the test to check."""
    T, hs = q.shape
    rw, br = 16 * mt, NWARPS * 16 * mt
    nkb, nqt, c = -(-T // br), -(-T // bc), scale * np.log2(np.e)
    K, V, Q, dO = padded(k, nkb * br), padded(v, nkb * br), padded(q, nqt * bc), padded(do, nqt * bc)
    Lc, Dp = np.append(lse * np.log2(np.e), np.zeros(nqt * bc - T)), np.append(D, np.zeros(nqt * bc - T))
    dq_acc, dq = np.full((nqt * bc, hs), np.nan), np.full((T, hs), np.nan)
    order = {qt: [] for qt in range(nqt)}
    for kb in range(nkb):   # the tickets' order; a block's wait makes the sums run in it whatever the schedule
        first = (kb * br) // bc
        for qt in range(nqt - 1, first - 1, -1):
            qs = np.arange(qt * bc, qt * bc + bc)
            sdS = np.full((br, bc), np.nan)   # rows of warps that skip the tile are never written
            for w in range(NWARPS):
                k0 = kb * br + w * rw
                if qt * bc + bc - 1 < k0:
                    continue
                keys = np.arange(k0, k0 + rw)
                p = np.exp2(K[keys] @ Q[qs].T * c - Lc[qs][None, :])
                if qt * bc < k0 + rw - 1 or qt * bc + bc > T:
                    p[~((keys[:, None] <= qs[None, :]) & (qs[None, :] < T) & (keys[:, None] < T))] = 0.0
                sdS[w * rw:(w + 1) * rw] = p * (V[keys] @ dO[qs].T - Dp[qs][None, :])
            nk = min(br, qt * bc + bc - kb * br) // 16 * 16
            part = sdS[:nk].T @ K[kb * br:kb * br + nk]
            acc = part if kb == 0 else dq_acc[qs] + part
            order[qt].append(kb)
            if kb == min(qt * bc + bc - 1, T - 1) // br:
                live = qs < T
                dq[qs[live]] = acc[live] * scale
            else:
                dq_acc[qs] = acc
    return dq, order


def backward_ds(q, k, v, do, lse, D, scale, mt, bc, bk, qb_rows=None, reach=0):
    """The half builds' backward with dS stored: backward_dkdv's loop also writing each warp's dS^T rows of the
    tiles it computes into ds_t [T, ldq] (NaN where never written, as uninitialized memory may hold), then
    attention_backward_dq_ds's loop for blocks of qb_rows queries (default 4 * 16 * mt; half that: two warps a
    query chunk, each half the columns, and the pieces whose key chunk lies past their query chunk left unstaged,
    NaN as a stale buffer may hold): bk keys of ds_t (zeros past T and ldq) and k at a time, a warp's k16 slices
    only where they start at or before its last query (reach: that many slices further, for the test to fail).
    A NaN read anywhere reaches dq; an element no warp writes stays NaN."""
    T, hs = q.shape
    rw, br = 16 * mt, NWARPS * 16 * mt
    qbr = qb_rows or br
    chunks = qbr // rw
    cols = hs * chunks // NWARPS
    ldq = -(-T // bc) * bc
    ds_t = np.full((T, ldq), np.nan)
    backward_dkdv(q, k, v, do, lse, D, scale, mt, bc, ds_t)
    nqb = -(-T // qbr)
    nkt = -(-T // bk)
    held = np.full((nkt * bk, nqb * qbr), np.nan)   # ds_t within the grid's reach (past T or ldq: masked below)
    held[:T, :ldq] = ds_t
    K = padded(k, nkt * bk + 16 * reach)
    dq = np.full((T, hs), np.nan)
    for qb in range(nqb):
        last = min(qb * qbr + qbr - 1, T - 1) // bk
        staged = []
        for kt in range(last + 1):
            j = kt * bk + np.arange(bk)[:, None]
            i = qb * qbr + np.arange(qbr)[None, :]
            inside = (j < T) & (i < ldq)
            tile = np.where(inside, held[kt * bk:kt * bk + bk, qb * qbr:qb * qbr + qbr], 0.0)
            if qbr != br:
                tile[inside & (j // rw > i // rw)] = np.nan
            staged.append(tile)
        for w in range(NWARPS):
            chunk, d0 = w % chunks, w // chunks * cols
            r0 = qb * qbr + chunk * rw
            rows, acc = np.arange(r0, r0 + rw), np.zeros((rw, cols))
            for kt in range(last + 1):
                for ks in range(bk // 16):
                    j0 = kt * bk + ks * 16
                    if j0 > r0 + rw - 1 + 16 * reach:
                        continue
                    tile = staged[kt][ks * 16:ks * 16 + 16, chunk * rw:chunk * rw + rw]
                    acc += tile.T @ K[j0:j0 + 16, d0:d0 + cols]
            keep = rows < T
            dq[rows[keep], d0:d0 + cols] = acc[keep] * scale
    return dq


def dq_ds_blocks():
    """attention.cu's dQ-from-dS block: 4 * 16 * MT queries (each warp every column). (Half that, two warps a query
    chunk, is still a case of the template and of backward_ds above, but its kernels were removed: attention.cu's
    header.)"""
    return [NWARPS * 16 * gpu.attention_geometry()["half"]["mt"]]


@pytest.mark.parametrize("queries", dq_ds_blocks())
@pytest.mark.parametrize("T", [1, 7, 31, 32, 33, 64, 65, 127, 128, 129, 200, 256, 257, 1000, 1024])
def test_dq_from_the_stored_ds_reads_only_what_dkdv_wrote(T, queries):
    g = gpu.attention_geometry()["half"]
    rng = np.random.default_rng(T + 2)
    q, k, v, do = (rng.standard_normal((T, 16)) for _ in range(4))
    o, lse, D, dq, dk, dv = dense(q, k, v, do, 0.25)
    dq2 = backward_ds(q, k, v, do, lse, D, 0.25, g["mt"], g["backward_dkdv"],
                      gpu.kernel_define("attention.cu", "DSQ_KEYS"), queries)
    np.testing.assert_allclose(dq2, dq, rtol=1e-10, atol=1e-12, err_msg=f"dq T={T} queries={queries}")


@pytest.mark.parametrize("queries", dq_ds_blocks())
def test_dq_from_the_stored_ds_fails_one_slice_further(queries):
    """The transcription can tell: one k16 slice past a warp's last query reads what dK/dV never wrote (or, at
    half a block, what was never staged)."""
    g = gpu.attention_geometry()["half"]
    rng = np.random.default_rng(202)
    q, k, v, do = (rng.standard_normal((200, 16)) for _ in range(4))
    o, lse, D, dq, dk, dv = dense(q, k, v, do, 0.25)
    dq2 = backward_ds(q, k, v, do, lse, D, 0.25, g["mt"], g["backward_dkdv"],
                      gpu.kernel_define("attention.cu", "DSQ_KEYS"), queries, reach=1)
    assert np.isnan(dq2).any()


@pytest.mark.parametrize("T", [1, 7, 31, 32, 64, 65, 127, 128, 129, 200, 256, 1000, 1024])
def test_the_fused_backward_sums_every_key_block_in_order(T):
    g = gpu.attention_geometry()["half"]
    rng = np.random.default_rng(T + 1)
    q, k, v, do = (rng.standard_normal((T, 16)) for _ in range(4))
    o, lse, D, dq, dk, dv = dense(q, k, v, do, 0.25)
    dq2, order = backward_fused(q, k, v, do, lse, D, 0.25, g["mt"], g["backward_dkdv"])
    np.testing.assert_allclose(dq2, dq, rtol=1e-10, atol=1e-12, err_msg=f"dq T={T}")
    br, bc = NWARPS * 16 * g["mt"], g["backward_dkdv"]
    for qt, blocks in order.items():   # each tile: every key block at or before its queries, once, in order
        assert blocks == list(range(min(qt * bc + bc - 1, T - 1) // br + 1)), (qt, blocks)


@pytest.mark.parametrize("build", ["half", "float32"])
@pytest.mark.parametrize("T", [1, 7, 31, 64, 65, 127, 128, 129, 200, 256, 1000])
def test_the_loops_cover_causal_attention(build, T):
    g = gpu.attention_geometry()[build]
    rng = np.random.default_rng(T)
    q, k, v, do = (rng.standard_normal((T, 16)) for _ in range(4))
    o, lse, D, dq, dk, dv = dense(q, k, v, do, 0.25)
    o2, lse2 = forward(q, k, v, 0.25, g["mt"], g["forward"])
    dq2 = backward_dq(q, k, v, do, lse, D, 0.25, g["mt"], g["backward_dq"])   # the float32 builds' dQ
    dk2, dv2 = backward_dkdv(q, k, v, do, lse, D, 0.25, g["mt"], g["backward_dkdv"])
    for name, got, want in (("out", o2, o), ("lse", lse2, lse), ("dq", dq2, dq), ("dk", dk2, dk), ("dv", dv2, dv)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=f"{name} T={T} {build}")


@pytest.mark.parametrize("hs", [32, 64])
def test_the_compiled_scale_is_the_wrappers(hs):
    """attention.cu's Scale<HS> (a compile-time constant) is float32(1 / sqrt(hs)), as the reference takes it."""
    src = gpu.load_source("attention.cu")
    found = re.search(rf"struct Scale<{hs}> {{ static constexpr float value = \(float\)([0-9.e+-]+); }}", src)
    assert found, f"attention.cu has no Scale<{hs}>"
    assert np.float32(float(found.group(1))) == np.float32(1.0 / np.sqrt(hs))


# ---- dropout's keep bits (attention.cu's Dropout::keep_bits_of), lane by lane ----
def splitmix(seed, counter):
    m = (1 << 64) - 1
    x = (seed + counter * 0x9E3779B97F4A7C15) & m
    z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def field(z, odd):
    return (z >> 16) & 0xFFFFFF if odd else z >> 40


def keep_bits_of(draw, edge, at, mt, nt, bh, T, seed, off, thr):
    """{(lane, m, n, e): kept} for a warp's block: at(lane, m, n, e) gives register (m, n, e)'s (query, key).
    Transcribed from the kernel: the counters it computes from register (0, 0, 0)'s flat index plus the
    unrolled loops' offsets, the skipped draws of an edge block (bits left 0), the high and low fields'
    bits, and for LANE_PAIRS which lane draws which pair and the bits it takes from lane ^ 4."""
    regs = [(m, n, e) for m in range(mt) for n in range(nt) for e in range(4)]
    hi, lo, odd_of = {}, {}, {}
    for lane in range(32):
        i00, j00 = at(lane, 0, 0, 0)
        odd = j00 & 1 if draw == "lane_pairs" else 0
        odd_of[lane] = odd
        e00 = (bh * T + i00 + odd) * T + j00 - odd
        for m, n, e in regs[::2]:   # e = 2r: register pairs
            (i0, j0), (i1, j1) = at(lane, m, n, e), at(lane, m, n, e + 1)
            if draw == "each":
                for h, (i, j) in enumerate(((i0, j0), (i1, j1))):
                    if not edge or j <= i:
                        x = e00 + (i - i00) * T + (j - j00)
                        hi[lane, m, n, e + h] = field(splitmix(seed, off + (x >> 1)), x & 1) >= thr
            elif not edge or j0 - odd <= i0 + odd:
                z = splitmix(seed, off + (e00 >> 1) + (i0 - i00) * (T >> 1) + (j0 - j00) // 2)
                hi[lane, m, n, e], lo[lane, m, n, e] = field(z, 0) >= thr, field(z, 1) >= thr
    keep = {}
    for lane in range(32):
        for m, n, e in regs:
            pair = (lane, m, n, e - e % 2)
            if draw == "each":
                keep[lane, m, n, e] = hi.get((lane, m, n, e), False)
            elif draw == "row_pairs":   # (i, j) the high field, (i, j + 1) the low one
                keep[lane, m, n, e] = (lo if e % 2 else hi).get(pair, False)
            elif e % 2 == odd_of[lane]:   # this lane's own draw: high field when odd = 0, else low
                keep[lane, m, n, e] = (lo if odd_of[lane] else hi).get(pair, False)
            else:                         # the partner's draw, the field the partner does not keep
                partner = lane ^ 4
                keep[lane, m, n, e] = (hi if odd_of[partner] else lo).get((partner,) + pair[1:], False)
    return keep


def dropout_blocks(build, T):
    """(kernel, draw, edge, at, mt, nt) of every block a warp draws for: the forward, dQ and dK/dV loops
    above, with attention.cu's register layout (g = lane / 4, t = lane % 4)."""
    geo = gpu.attention_geometry()[build]
    mt, rw = geo["mt"], 16 * geo["mt"]
    br = NWARPS * rw
    pairs = "each" if T % 2 else "row_pairs"
    for kernel in ("forward", "backward_dq"):
        bc = geo[kernel]
        for qb in range(-(-T // br)):
            for w in range(NWARPS):
                r0 = qb * br + w * rw
                for kb in range(min(qb * br + br - 1, T - 1) // bc + 1):
                    if kb * bc > r0 + rw - 1:
                        continue
                    edge = kb * bc + bc - 1 > r0 or kb * bc + bc > T
                    yield kernel, pairs, edge, (lambda lane, m, n, e, r0=r0, kb=kb, bc=bc: (
                        r0 + 16 * m + lane // 4 + 8 * (e >> 1), kb * bc + 8 * n + 2 * (lane % 4) + (e & 1))), mt, bc // 8
    bc = geo["backward_dkdv"]
    for kb in range(-(-T // br)):
        for w in range(NWARPS):
            k0 = kb * br + w * rw
            for qt in range((kb * br) // bc, -(-T // bc)):
                if qt * bc + bc - 1 < k0:
                    continue
                edge = qt * bc < k0 + rw - 1 or qt * bc + bc > T
                yield "backward_dkdv", "each" if T % 2 else "lane_pairs", edge, (lambda lane, m, n, e, k0=k0, qt=qt: (
                    qt * bc + 8 * n + 2 * (lane % 4) + (e & 1), k0 + 16 * m + lane // 4 + 8 * (e >> 1))), mt, bc // 8


@pytest.mark.parametrize("build", ["half", "float32"])
@pytest.mark.parametrize("T", [1, 2, 7, 64, 65, 130, 256])
def test_the_kernels_keep_bits_are_the_generators(build, T):
    """Every element a kernel's softmax keeps (j <= i < T) gets the bit rng.keep_mask gives it, in the forward,
    dQ and dK/dV (T odd: a draw an element; T even: one draw a pair, across lanes in dK/dV); and each kernel's
    blocks cover every such element."""
    from tr2.cupy_side import rng
    from tr2.cupy_side.gpu import halfbits
    p, seed, H = 0.3, 1337, 3
    off, thr = rng.site_offset(11, 7, 1), halfbits.dropout_threshold(p, float32_compare=True)
    want = rng.keep_mask(seed, off, (1, H, T, T), p)[0]
    for bh in (0, H - 1):
        seen = {"forward": set(), "backward_dq": set(), "backward_dkdv": set()}
        for kernel, draw, edge, at, mt, nt in dropout_blocks(build, T):
            keep = keep_bits_of(draw, edge, at, mt, nt, bh, T, seed, off, thr)
            for (lane, m, n, e), kept in keep.items():
                i, j = at(lane, m, n, e)
                if j <= i < T:
                    assert kept == want[bh, i, j], (kernel, draw, edge, lane, m, n, e, i, j)
                    seen[kernel].add((i, j))
        for kernel, got in seen.items():
            assert len(got) == T * (T + 1) // 2, kernel
