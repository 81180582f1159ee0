import re, sys
sys.path.insert(0, 'lib')
from pathlib import Path
from tr2.cupy_side.gpu import load_source, cubins
src = load_source("gelu.cu") + "\n" + Path("/tmp/gp512.cu").read_text()
n = cubins.Nvrtc()
n.compile(src, "gp512.cu", "sm_90a", ("-Xptxas", "-v"))
fn=None
for line in n.last_log.splitlines():
    m = re.search(r"Compiling entry function '(\w+)'", line)
    if m: fn = m.group(1)
    elif fn and fn.startswith("gp_") and ("Used" in line or "spill" in line or "C75" in line): print(fn, line.strip())
