"""PyTorch's causal attention (scaled_dot_product_attention on the cuDNN backend, what our torch side runs on the
H200) at a model's shape, one forward and backward after a warm-up pass, for Nsight Compute beside
scripts/attention_ncu.py: the same metrics on the kernels ours are measured against.

    ncu --clock-control none -k regex:"sdpa|flash|dot_do_o|convert_dq" --profile-from-start off ... \
        python3 scripts/sdpa_ncu.py [model] [dtype]

The second pass runs between cudaProfilerStart and cudaProfilerStop (as scripts/attention_ncu.py's).

The inputs are (B, H, T, 64) views of one (B, T, 3C) tensor, as nanoGPT's attention hands them over.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tr2.models import load_model


def main(argv) -> int:
    model = argv[0] if argv else "gpt2-small"
    dtype = getattr(torch, argv[1] if len(argv) > 1 else "bfloat16")
    cfg = load_model(model)
    B, T, C, H = cfg.batch_size, cfg.block_size, cfg.n_embd, cfg.n_head
    g = torch.Generator(device="cuda").manual_seed(0)
    qkv = torch.randn(B, T, 3 * C, device="cuda", dtype=dtype, generator=g).requires_grad_()
    dout = torch.randn(B, H, T, C // H, device="cuda", dtype=dtype, generator=g)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        for profiled in (False, True):
            if profiled:
                torch.cuda.synchronize()
                torch.cuda.profiler.start()
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=2))
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=cfg.dropout, is_causal=True)
            out.backward(dout)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"sdpa (cuDNN) {model} {dtype}: B={B} T={T} C={C} H={H} dropout={cfg.dropout}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
