"""Can tests/test_gpu_backend_cpu.py's bf16 oracle test fail? Rounding by truncation against PyTorch's float32 ->
bfloat16 conversion on the test's halfway values (the same generator and seed as the test's `ties`)."""
import numpy as np
import torch

rng = np.random.default_rng(1)
rng.standard_normal(100000)   # the test draws x first
ties = (rng.integers(0, 1 << 16, 1000, dtype=np.uint32) << 16 | 0x8000).view(np.float32)
ties = ties[np.isfinite(ties)]
trunc = (ties.view(np.uint32) >> 16).astype(np.uint16)
want = torch.from_numpy(ties).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
print(f"truncation differs from torch's rounding on {(trunc != want).sum()} of {len(ties)} ties (torch {torch.__version__})")
