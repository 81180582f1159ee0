import json, os, shlex, shutil, signal, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, "/tmp/audit/drv")
from cases import CASES
root, tag = Path(sys.argv[1]), sys.argv[2]
only = sys.argv[3:]  # optional ids
W = Path(f"/tmp/audit/drv/w-{tag}"); R = W / "res"
def fresh():
    if W.exists(): shutil.rmtree(W)
    W.mkdir(parents=True); (W / "dir").mkdir(); (W / "d.jsonl").mkdir(); (W / "file").write_text("x\n")
    (W / "empty.npz").write_bytes(b""); (W / "empty.npy").write_bytes(b"")
    R.mkdir()
    for n in ("method_a-20261204-214535-cpu", "series-20261204-214321-cpu"):
        shutil.copytree(root / "results" / n, R / n)
    def mk(src, dst, fn):
        shutil.copytree(R / src, R / dst); fn(R / dst)
    mk("series-20261204-214321-cpu", "series-20261204-000001-cpu", lambda d: (d / "card.yaml").write_bytes(b"\xff\xfe"))
    mk("series-20261204-214321-cpu", "series-20261204-000002-cpu", lambda d: (d / "card.yaml").write_text(""))
    def cdir(d): (d / "card.yaml").unlink(); (d / "card.yaml").mkdir()
    mk("series-20261204-214321-cpu", "series-20261204-000003-cpu", cdir)
    def garble(d):
        lines = (d / "runs.jsonl").read_text().splitlines(True); lines[1] = "not json {\n"; (d / "runs.jsonl").write_text("".join(lines))
    mk("method_a-20261204-214535-cpu", "method_a-20261204-000004-cpu", garble)
    mk("method_a-20261204-214535-cpu", "method_a-20261204-000005-cpu", lambda d: open(d / "runs.jsonl", "ab").write(b"\xff\xfe\n"))
    mk("method_a-20261204-214535-cpu", "method_a-20261204-000007-cpu", lambda d: open(d / "runs.jsonl", "ab").write(b"[1, 2]\n"))
    mk("series-20261204-214321-cpu", "series-20261204-000009-cpu", lambda d: open(d / "runs.jsonl", "ab").write(b"[1, 2]\n"))
def snap():
    s = {}
    for p in W.rglob("*"):
        if "/cache/" in str(p) or p.name == ".lock": continue
        s[str(p)] = p.stat().st_size if p.is_file() else -1
    s.update({f"ROOT:{n}": 0 for n in os.listdir(root)}); s.update({f"RESULTS:{n}": 0 for n in os.listdir(root / "results")})
    return s
out = open(f"/tmp/audit/drv/{tag}.jsonl", "a")
PY = "/work/main/.venv/bin/python"
for cid, tmpl, env in CASES:
    if only and cid not in only: continue
    fresh()
    cmd = tmpl.format(PY=PY, W=W, C="/tmp/audit/cards", R=R, ROOT=root)
    e = {**os.environ, "PYTHONPATH": str(root / "lib"), **{k: v.format(W=W) for k, v in env.items()}}
    e.pop("TR2_DEADLINE", None) if "TR2_DEADLINE" not in env else None
    before = snap(); t0 = time.time()
    p = subprocess.Popen(cmd, shell=True, cwd=root, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        o, er = p.communicate(timeout=25); rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL); o, er = p.communicate(); rc = "killed@25s"
    after = snap()
    new = sorted(set(after) - set(before)); changed = sorted(k for k in before if k in after and before[k] != after[k])
    lines = [l for l in er.splitlines() if l.strip()]
    rec = {"id": cid, "cmd": cmd.replace(str(W), "$W").replace(PY, "python").replace("/tmp/audit/cards", "$CARDS"), "rc": rc,
           "err_lines": len(lines), "first": lines[0][:400] if lines else "", "last": lines[-1][:300] if len(lines) > 1 else "",
           "stdout_lines": len(o.splitlines()), "new": [n.replace(str(W), "$W") for n in new][:5], "changed": [c.replace(str(W), "$W") for c in changed][:5],
           "secs": round(time.time() - t0, 1)}
    out.write(json.dumps(rec) + "\n"); out.flush()
    print(cid, rc, len(lines), (lines[0][:100] if lines else ""), "NEW" if new or changed else "", flush=True)
    # clean anything a case left in the repository root (identity_check --out .jsonl at HEAD)
    for n in ({".jsonl", ".runs"} & set(os.listdir(root))) - {k[5:] for k in before if k.startswith("ROOT:")}:
        q = root / n; shutil.rmtree(q) if q.is_dir() else q.unlink()   # what identity_check --out .jsonl left
    for n in set(os.listdir(root / "results")) - {k[8:] for k in before if k.startswith("RESULTS:")}:
        pass  # never delete under results/ of the real tree; reported instead
