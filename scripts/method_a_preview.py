"""Method A's verdicts from a folder whose runs are not all in, without touching it: the folder is copied to a
temporary place and summarized there (tr2.method_a.summarize), and every judged step of each configuration printed.

    python scripts/method_a_preview.py results/method_a-...   (the stage writes its own verdict once all runs are in)
"""
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from tr2 import method_a  # noqa: E402

src = Path(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    d = Path(tmp) / src.name
    shutil.copytree(src, d)
    s = method_a.summarize(d)
print(f"{src}: {s['runs']['finished']} of {s['runs']['planned']} runs finished")
for c in s["configs"]:
    v = c["verdict"]
    print(f"\n{c['model']} {c['dtype']}: passed {v['passed']} ({v['reason']}); seeds torch {v['seeds']['torch']}, "
          f"cupy {v['seeds']['cupy']}")
    print("  step  torch median  cupy median  torch range  cupy range    diff   allowed  ok")
    for r in v["steps"]:
        if r["diff"] is None:
            print(f"  {r['step']:5d}  {r['why']}")
            continue
        print(f"  {r['step']:5d}  {r['torch_median']:12.4f}  {r['cupy_median']:11.4f}  {r['torch_range']:11.4f}  "
              f"{r['cupy_range']:10.4f}  {r['diff']:7.4f}  {r['allowed']:7.4f}  {r['ok']}")
