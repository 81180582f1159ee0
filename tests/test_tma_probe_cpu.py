"""scripts/probes/tma_wgmma_probe.py's pure functions, without a GPU: the 128B swizzle it un-swizzles tiles
with, the wgmma descriptor packing it checks the device's words against, and the tensor map's arguments."""
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).parents[1] / "scripts" / "probes" / "tma_wgmma_probe.py"
_spec = importlib.util.spec_from_file_location("tma_wgmma_probe", _PATH)
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)


def test_importing_the_probe_needs_no_cupy():
    assert "cupy" not in probe.__dict__


def test_swizzle_permutes_each_1024_byte_block_onto_itself():
    offsets = np.arange(8 * probe.SWIZZLE_SPAN)
    sw = probe.swizzle_128b(offsets)
    for block in range(8):
        lo = block * probe.SWIZZLE_SPAN
        got = sw[lo:lo + probe.SWIZZLE_SPAN]
        assert got.min() >= lo and got.max() < lo + probe.SWIZZLE_SPAN
        assert np.array_equal(np.sort(got), offsets[lo:lo + probe.SWIZZLE_SPAN])
    assert np.array_equal(probe.swizzle_128b(sw), offsets)   # XOR by bits it does not change: its own inverse


def test_swizzle_moves_whole_16_byte_chunks_by_row_xor():
    # the .cu's form: chunk c of row r lies at r * 128 + ((c ^ (r % 8)) * 16), bytes inside a chunk in order
    for r in range(64):
        for c in range(8):
            for b in (0, 7, 15):
                assert probe.swizzle_128b(r * 128 + c * 16 + b) == r * 128 + ((c ^ (r % 8)) * 16) + b
    assert probe.swizzle_128b(0) == 0 and probe.swizzle_128b(128) == 128 + 16 and probe.swizzle_128b(7 * 128) == 7 * 128 + 112


def test_unswizzle_tile_inverts_a_swizzled_copy():
    rng = np.random.default_rng(0)
    tile = rng.integers(0, 1 << 16, (64, 64), dtype=np.uint16)
    logical = tile.view(np.uint8).reshape(-1)
    raw = np.empty_like(logical)
    raw[probe.swizzle_128b(np.arange(logical.size))] = logical   # what the copy engine writes
    assert not np.array_equal(raw, logical)
    assert np.array_equal(probe.unswizzle_tile(raw), tile)


def test_descriptor_fields_sit_where_the_ptx_isa_puts_them():
    # K-major 128B q tile at shared address 0x400: start 0x400 >> 4 = 0x40 (bits 0-13), LBO 16 >> 4 = 1 (bits
    # 16-29), SBO 1024 >> 4 = 0x40 (bits 32-45), swizzle 1 = 128B (bits 62-63)
    assert probe.wgmma_desc(0x400, 16, 1024) == 0x4000_0040_0001_0040
    # MN-major v tile one k16 step in (0x2000 + 2048 = 0x2800), LBO 8192 >> 4 = 0x200, SBO 1024, base offset 5
    # (bits 49-51: 5 << 49 = 0xA_0000_0000_0000)
    assert probe.wgmma_desc(0x2800, 8192, 1024, base_offset=5) == 0x400A_0040_0200_0280
    # the k16 step of a K-major operand: +32 bytes is +2 in the start field and nothing else
    assert probe.wgmma_desc(0x420, 16, 1024) - probe.wgmma_desc(0x400, 16, 1024) == 2
    # no swizzle: bits 62-63 clear
    assert probe.wgmma_desc(0x400, 16, 1024, swizzle="none") >> 62 == 0
    assert probe.wgmma_desc(0x400, 16, 1024, swizzle="32B") >> 62 == 3


def test_descriptor_fields_do_not_overlap_and_reject_overflow():
    masks = [((1 << w) - 1) << lo for lo, w in probe.DESC_FIELDS.values()]
    for i, a in enumerate(masks):
        for b in masks[i + 1:]:
            assert a & b == 0
    with pytest.raises(ValueError):
        probe.wgmma_desc(0, 16, 1024, base_offset=8)


def test_device_descriptor_matches_the_python_packing():
    # the .cu's desc_sw128 shifts (start, LBO, SBO) by 0, 16, 32 and sets bit 62: the same as DESC_FIELDS
    src = probe.CU_FILE.read_text()
    body = re.search(r"u64 desc_sw128\(.*?\n}", src, re.S).group(0)
    assert "<< 16" in body and "<< 32" in body and "DESC_SWIZZLE_128B" in body
    assert "DESC_SWIZZLE_128B = 1ull << 62" in src
    assert probe.DESC_FIELDS["swizzle"][0] == 62 and probe.DESC_SWIZZLE["128B"] == 1


def test_every_kernel_the_probe_launches_is_in_the_cu():
    declared = set(re.findall(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\)\s+)?(\w+)\(', probe.CU_FILE.read_text()))
    declared |= {m for m in re.findall(r"^TPUT\((\w+),", probe.CU_FILE.read_text(), re.M)}
    assert set(probe.KERNELS) <= declared


def test_tensor_map_arguments_of_the_qkv_matrix():
    # gpt2-small's qkv: rows B*T = 8192, row length 3C = 2304 bf16; dims innermost first, the row stride in bytes
    gdim, gstride, box, estride = probe.tensor_map_args(8192, 2304)
    assert gdim == (2304, 8192) and gstride == (4608,) and box == (64, 64) and estride == (1, 1)
    with pytest.raises(ValueError):
        probe.tensor_map_args(10, 12)        # 24-byte rows: not a multiple of 16
    with pytest.raises(ValueError):
        probe.tensor_map_args(64, 256, box_cols=128)   # 256-byte box rows exceed the 128B swizzle span
