import sys, traceback, os
from pathlib import Path
from tr2 import explore
R = Path('/tmp/audit/w/res'); W = Path('/tmp/audit/w')
cases = [
 ("index(root='/nowhere')", lambda: explore.index('/nowhere')),
 ("index(root=a file)", lambda: explore.index(W/'file')),
 ("index(root=res with non-UTF-8 card.yaml folder)", lambda: explore.index(R)),
 ("runs(/nowhere)", lambda: explore.runs('/nowhere')),
 ("runs(a file)", lambda: explore.runs(str(W/'file'))),
 ("runs(folder of another stage)", lambda: explore.runs(R/'method_a-20261204-214535-cpu')),
 ("runs(series folder, non-UTF-8 card.yaml)", lambda: explore.runs(R/'series-20261204-000001-cpu')),
 ("curves_a(method_a folder, non-UTF-8 runs.jsonl line)", lambda: explore.curves_a(R/'method_a-20261204-000005-cpu')),
 ("verdicts_a(method_a folder, summary.json a list)", lambda: explore.verdicts_a(R/'method_a-20261204-000006-cpu')),
 ("compare(series, method_a)", lambda: explore.compare(R/'series-20261204-214321-cpu', R/'method_a-20261204-214535-cpu')),
 ("compare(/nowhere, /nowhere2)", lambda: explore.compare('/nowhere', '/nowhere2')),
 ("load(root='/nowhere')", lambda: explore.load('/nowhere')),
 ("load(root=res)", lambda: explore.load(R)),
 ("select(index, stage='dance')", lambda: explore.select(explore.index(R), stage='dance')),
 ("summary(/nowhere)", lambda: explore.summary('/nowhere')),
 ("condition_table(/nowhere)", lambda: explore.condition_table('/nowhere')),
 ("footprint(res folder list)", lambda: explore.footprint([R/'series-20261204-214321-cpu'])),
 ("runs(123)", lambda: explore.runs(123)),
]
for name, f in cases:
    try:
        r = f()
        desc = f"{type(r).__name__}" + (f" {getattr(r, 'shape', '')}" if hasattr(r, 'shape') else (f" keys={len(r)}" if isinstance(r, dict) else ""))
        print(f"OK   {name}: {desc}")
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)[-1]
        print(f"EXC  {name}: {type(e).__name__}: {' '.join(str(e).split())[:160]} (at {Path(tb.filename).name}:{tb.lineno})")
