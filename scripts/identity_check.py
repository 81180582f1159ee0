"""Does this checkout reproduce a folder's recorded runs to the byte? Rerun them for N steps and compare metrics files.

    python scripts/identity_check.py FOLDER --runs PATTERN [PATTERN ...] --steps N --out OUT.jsonl

For each record of FOLDER's runs file whose key matches a pattern (fnmatch), finished ok, holding the trainer's
command (`cmd`, `python -m tr2.train ... --metrics PATH`: method A's runs): that command again with this interpreter
in place of the recorded one, `--steps N`, and its metrics file and log in a scratch folder (--scratch DIR, by
default beside OUT: <OUT without .jsonl>.runs/; on the device keep it out of $OUT, which returns 8 files at most and
lost a call's results to it once: results/h200-edition-20261203e/README.md); then every line of the recorded metrics
file whose step is <= N against the new file's line at the same place, as text. One JSON line a run is appended to
OUT as it ends: key, steps_compared (the distinct steps), through_step, lines_compared, identical, first_difference
({step, recorded, new}: the two lines, new null where the new file ended early) or null, commit (this checkout's, as
a stage records it), recorded_commit (the record's, else its folder's first session's), status, returncode, log.

Why `--steps N` stops a run without changing it: the learning rate is the model's schedule (tr2.schedule.get_lr with
the model's warmup_iters and lr_decay_iters), never a function of --steps; evaluations fall where step %
eval_interval == 0; the batches come in step order from the seed's generator, the next one drawn only while a step is
left. So a run of N steps writes the first lines of the whole run, byte for byte (tests/test_identity_check.py runs
both sides on the CPU to show it). The metrics file holds no clock (its lines are {kind: loss, step, loss} and
{kind: eval, step, train, val}), so whole lines are compared.

Exit 0 when every run is identical, 1 when one is not (or did not run to its end), 2 for bad input (one line).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from tr2 import Tr2Error  # noqa: E402
from tr2.clock import run_logged  # noqa: E402
from tr2.configs import compile_caches  # noqa: E402
from tr2.explore import first_commit  # noqa: E402
from tr2.results import append_jsonl, runs_file, stage_of  # noqa: E402
from tr2.results import read_jsonl  # noqa: E402
from tr2.retire import select as select_keys  # noqa: E402
from tr2.sysinfo import git_commit  # noqa: E402
from tr2 import trainargs  # noqa: E402

TRAINER = ("-m", "tr2.train")


class Parser(trainargs.Parser):   # its one line, and an option given twice refused, under this script's name
    def error(self, message):
        sys.stderr.write(f"identity_check: error: {message}\n")
        sys.exit(2)


def flag_value(cmd: list, flag: str):
    """The value after `flag` in a command, or None."""
    return cmd[cmd.index(flag) + 1] if flag in cmd[:-1] else None


def usable(record: dict) -> bool:
    """A finished run whose command is the trainer's, writing a metrics file: one this script can run again."""
    cmd = record.get("cmd") or []
    return (record.get("status") == "ok" and isinstance(record.get("metrics"), str) and flag_value(cmd, "--metrics")
            is not None and flag_value(cmd, "--steps") is not None
            and any(cmd[i:i + 2] == list(TRAINER) for i in range(len(cmd))))


def select(folder: Path, patterns: list) -> list:
    """The usable records of the folder whose keys match a pattern; one line where a pattern matches none."""
    name = runs_file(stage_of(folder) or "method_a")
    if not (folder / name).is_file():
        raise Tr2Error(f"FOLDER: {str(folder)!r} holds no {name}; allowed: a stage's results folder with runs "
                       "(e.g. results/method_a-20261202-170258-h200-edition)")
    return select_keys([r for r in read_jsonl(folder / name) if usable(r)], patterns, f"{folder.name}/{name}",
                       "finished trainer run")


def check_recorded_files(folder: Path, records: list) -> None:
    """Each chosen run's recorded metrics file is in the folder, before the reruns take their minutes (the fifty-ninth
    session's first check found a folder that had travelled without its files and stopped on a traceback)."""
    missing = [r["metrics"] for r in records if not (folder / r["metrics"]).is_file()]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise Tr2Error(f"FOLDER: {folder.name} lacks the recorded metrics file(s) {shown}; allowed: a folder that "
                       "holds its runs' files (on the device: `scripts/device_tree.sh slim FOLDER` keeps them)")


def check_steps(steps: int, records: list) -> None:
    shortest = min(int(flag_value(r["cmd"], "--steps")) for r in records)
    if not 0 <= steps <= shortest:
        raise Tr2Error(f"--steps: {steps} is not allowed; allowed: an integer from 0 to {shortest} (the fewest steps "
                       "of the runs chosen)")


def command(record: dict, steps: int, metrics: Path) -> list:
    """The recorded command with this interpreter, `steps` steps and the scratch metrics file; all else as run."""
    cmd = [sys.executable, *record["cmd"][1:]]
    for flag, value in (("--steps", str(steps)), ("--metrics", str(metrics))):
        cmd[cmd.index(flag) + 1] = value
    return cmd


def step_lines(path: Path, steps: int) -> list:
    """(step, line) of every line of a metrics file whose step is <= steps, in file order."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            step = json.loads(line)["step"]
        except (json.JSONDecodeError, KeyError, TypeError):
            step = None   # a torn or foreign line: kept, so that it differs where it stands
        if step is None or step <= steps:
            out.append((step, line))
    return out


def compare(recorded: Path, new: Path, steps: int) -> dict:
    """The recorded file's lines up to `steps` against the new file's, place by place."""
    want, got = step_lines(recorded, steps), step_lines(new, steps) if new.is_file() else []
    first = None
    for i in range(max(len(want), len(got))):
        a, b = (want[i] if i < len(want) else None), (got[i] if i < len(got) else None)
        if a is None or b is None or a[1] != b[1]:
            first = {"step": (a or b)[0], "recorded": a and a[1], "new": b and b[1]}
            break
    return {"steps_compared": len({s for s, _ in want}), "through_step": max((s for s, _ in want), default=None),
            "lines_compared": len(want), "identical": first is None, "first_difference": first}


def check_one(folder: Path, record: dict, steps: int, scratch: Path, commit) -> dict:
    slug = record["key"].replace("/", "_")
    metrics, log = scratch / f"{slug}.metrics.jsonl", scratch / f"{slug}.log"
    metrics.unlink(missing_ok=True)   # the trainer appends: a file of an earlier check would double its lines
    config = "_".join(record["key"].split("/")[:-1]) or slug
    res = run_logged(command(record, steps, metrics), log, env=compile_caches(config, scratch / "cache"))
    out = {"key": record["key"], **compare(folder / record["metrics"], metrics, steps), "commit": commit,
           "recorded_commit": record.get("commit") or first_commit(folder), "status": res["status"],
           "returncode": res["returncode"], "log": str(log)}
    if res["status"] != "ok":
        out["identical"] = False   # a run that failed proves nothing, even where its lines so far agree
    return out


def main(argv=None) -> int:
    p = Parser(prog="python scripts/identity_check.py", description=__doc__.split("\n")[0])
    p.add_argument("folder", metavar="FOLDER", help="a stage's results folder (method A's)")
    p.add_argument("--runs", nargs="+", required=True, metavar="PATTERN", help="fnmatch patterns of run keys")
    p.add_argument("--steps", type=int, required=True, help="compare steps 0..N (the run stops after step N)")
    p.add_argument("--out", required=True, help="the JSON lines file to append one line a run to")
    p.add_argument("--scratch", help="where the reruns' metrics files and logs go (default: beside OUT, "
                   "<OUT without .jsonl>.runs/); on the device keep it out of $OUT, whose files come back 8 at most")
    a = p.parse_args(argv)
    try:
        folder = Path(a.folder).resolve()
        if not folder.is_dir():
            raise Tr2Error(f"FOLDER: {a.folder!r} is not a folder; allowed: a stage's results folder")
        # checked before the reruns, which take minutes: the first line is appended after the first of them
        trainargs.check_output_path("--out", a.out, ".jsonl", make_folder=True)
        out = Path(a.out)
        scratch = Path(a.scratch) if a.scratch else out.with_name(out.name[:-len(".jsonl")] + ".runs")
        if scratch.exists() and not scratch.is_dir():
            raise Tr2Error(f"--scratch: {str(scratch)!r} is a file; allowed: a folder (made if missing) for the reruns' "
                           "files")
        records = select(folder, a.runs)
        check_recorded_files(folder, records)
        check_steps(a.steps, records)
    except Tr2Error as e:
        sys.stderr.write(f"identity_check: error: {e}\n")
        return 2
    scratch.mkdir(parents=True, exist_ok=True)
    commit = git_commit().get("commit")
    all_same = True
    for r in records:
        res = check_one(folder, r, a.steps, scratch, commit)
        append_jsonl(out, res)
        all_same &= res["identical"]
        said = ("identical" if res["identical"] else f"run {res['status']}" if res["status"] != "ok"
                else f"differs at step {res['first_difference']['step']}")
        print(f"{r['key']}: {said} ({res['lines_compared']} lines, steps 0..{a.steps}; {res['status']})", flush=True)
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
