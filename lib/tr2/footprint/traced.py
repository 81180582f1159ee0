"""The traced run: the trainer under a wrapper that dumps its modules and maps at exit, polled while it runs."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from .. import REPO_ROOT
from .maps import MapsPoller, parse_maps

WRAPPER = r"""
import sys
_dump = sys.argv[1]
_argv = sys.argv[2:]
sys.argv = ["tr2.train"] + _argv
def _write(rc):
    mods = {}
    for name, mod in list(sys.modules.items()):
        try:
            f = getattr(mod, "__file__", None)
        except Exception:
            f = None
        mods[name] = f if isinstance(f, str) else None
    try:
        with open("/proc/self/maps") as fh:
            maps = fh.read()
    except OSError:
        maps = ""
    import json, sysconfig
    with open(_dump, "w") as fh:
        json.dump({"returncode": rc, "modules": mods, "maps": maps, "executable": sys.executable,
                   "prefix": sys.prefix, "base_prefix": sys.base_prefix, "version": sys.version.split()[0],
                   "stdlib": sysconfig.get_path("stdlib"),
                   "site": sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
                                  | set(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))))}, fh)
_rc = 1
try:
    from tr2.train import main
    _rc = main(_argv)
except SystemExit as e:
    _rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
finally:
    _write(_rc)
sys.exit(_rc)
"""


def trace_run(train_argv: list[str], log_path, dump_path, env=None, timeout_s=None) -> dict:
    """Run the trainer under the wrapper; poll the maps of its process tree while it runs.

    Returns {status, returncode, wall_s, polls, libraries (main process), libraries_children,
    modules (name -> file), interpreter facts}.
    """
    log_path, dump_path = Path(log_path), Path(dump_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    dump_path.unlink(missing_ok=True)
    cmd = [sys.executable, "-u", "-c", WRAPPER, str(dump_path), *train_argv]
    t0 = time.monotonic()
    status = "ok"
    with open(log_path, "w") as log:
        log.write("$ python -m tr2.train " + " ".join(train_argv) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(REPO_ROOT),
                                start_new_session=True)
        with MapsPoller(proc.pid) as poller:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                status = "timeout"
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)    # the run's own group: it and its compile workers
                proc.wait()
    wall = time.monotonic() - t0
    try:
        dump = json.loads(dump_path.read_text())
    except (OSError, json.JSONDecodeError):   # no dump: the run died before its wrapper could write one
        dump = {}
    main_libs = poller.libraries
    for lib in parse_maps(dump.get("maps", "")):   # the process's own last reading, at exit
        main_libs.setdefault(lib, True)
    if status == "ok" and proc.returncode != 0:
        status = "oom" if proc.returncode == 3 else "failed"
    return {
        "status": status, "returncode": proc.returncode, "wall_s": round(wall, 3), "polls": poller.polls,
        "libraries": list(main_libs), "libraries_children": [p for p in poller.children if p not in main_libs],
        "modules": dump.get("modules", {}), "executable": dump.get("executable", sys.executable),
        "stdlib": dump.get("stdlib") or sysconfig.get_path("stdlib"),
        "site": dump.get("site") or [sysconfig.get_path("purelib"), sysconfig.get_path("platlib")],
        "python": dump.get("version"),
    }
