import torch, sys
torch.manual_seed(0)
diffs = 0
for K in (65, 127, 384, 1000, 1536):
    for M, N in ((64, 384), (256, 1152), (7, 65)):
        a = torch.randn(M, K); b = torch.randn(K, N)
        ref = a @ b
        for off in range(1, 16):
            buf = torch.empty(M * K + off); av = buf[off:].view(M, K); av.copy_(a)
            bufb = torch.empty(K * N + off); bv = bufb[off:].view(K, N); bv.copy_(b)
            r = av @ bv
            if not torch.equal(r, ref): diffs += 1
print("threads", torch.get_num_threads(), "differing", diffs, "of", 5*3*15)
