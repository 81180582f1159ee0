import re, sys, time
sys.path.insert(0, 'lib')
from pathlib import Path
from tr2.cupy_side.gpu import load_source
from tr2.cupy_side.gpu import cubins
src = load_source("gelu.cu") + "\n" + Path("scripts/probes/gelu_product_probe.cu").read_text()
n = cubins.Nvrtc()
t = time.time()
cub = n.compile(src, "gelu_product_probe.cu", "sm_90a", ("-Xptxas", "-v"))
print(len(cub), "bytes", round(time.time()-t,1), "s")
fn = None
for line in n.last_log.splitlines():
    m = re.search(r"Compiling entry function '(\w+)'", line)
    if m: fn = m.group(1)
    elif fn and fn.startswith('gp_') and ("Used" in line or "spill" in line or "arn" in line): print(fn, line.strip())
    elif "warning" in line.lower() or "error" in line.lower(): print(line)
