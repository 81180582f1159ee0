"""The cupy side's dropout masks (rng.py) by their statistics: the keep rate at sites and steps of the char model's
numbering, how often two masks of different sites, steps or seeds agree (independent masks at p = 0.2: 0.8^2 + 0.2^2
= 0.68), and the correlation of the two elements that share one draw.   python scripts/dropout_mask_stats.py"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from tr2.cupy_side import rng  # noqa: E402

p, seed, n_layer = np.float32(0.2), 1337, 6
ns, n = rng.n_sites(n_layer), 64 * 256 * 384   # the char model's residual sites: [B, T, C]
masks = {}
for step in (0, 1, 4999):
    for site in (0, 1, 2, 3, 4, 5, 6, ns - 1):
        masks[(step, site)] = rng.uniform(seed, rng.site_offset(step, ns, site), n) >= p
        print(f"step {step:4d} site {site:2d}: kept {masks[(step, site)].mean():.5f}")
keys = list(masks)
worst = max(abs((masks[a] == masks[b]).mean() - 0.68) for i, a in enumerate(keys) for b in keys[i + 1:])
print(f"{len(keys)} masks, every pair: largest |agreement - 0.68| = {worst:.5f}")
for other in (seed + 1, seed + 2):
    m = rng.uniform(other, rng.site_offset(0, ns, 0), n) >= p
    print(f"seed {other} against seed {seed} (step 0, site 0): agreement {(m == masks[(0, 0)]).mean():.5f}")
u = rng.uniform(seed, rng.site_offset(0, ns, 1), n)
print(f"the two elements of a draw: correlation {np.corrcoef(u[0::2], u[1::2])[0, 1]:+.5f}; mean u {u.mean():.5f}")
