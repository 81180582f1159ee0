"""python -m tr2.runner STAGE --card CARD [--resume DIR]: run one protocol stage's notebook on a card.

CARD is a file or a name under params/cards/. Everything that can be checked before any run is (`prepare`: one
line, exit 2, nothing written); then the results folder is made (or DIR reused) with card.yaml and machine.json
(tr2.stage.hold_card, as the stage's open_folder), and the stage's notebook runs from the repository root:

    papermill notebooks/STAGE.ipynb DIR/STAGE.ipynb -f CARD -p results_dir DIR -k python3 --log-output

`--resume DIR` continues a stage in the folder it started; the folder's card.yaml is its card, so --card may be
left out. `python -m tr2.runner latest STAGE --card NAME` prints the newest results folder of that stage and card.
`--root ROOT` makes the new folder under ROOT instead of results/ (and `latest ... --root ROOT` looks there): the
report's reproduce commands make each folder anew under results/repro/<its name>/ and name it by `latest`.

A stage in two places (the GPU machine has no papermill, and its wheels no longer travel beside the tree):
`--runs-only` runs the stage's runs and its summary in this process, no notebook (the same checks and folder first);
`--render DIR` then executes the notebook over that folder on any machine, running nothing (`render_only`: no run,
no retry, no check of the card against this machine), so the report can stitch it.

`--retire DIR --runs PATTERN [PATTERN ...] --reason TEXT` takes the runs whose keys match out of the folder, deleting
nothing (tr2.retire: records to retired.jsonl, their files and the stage's summary and notebook to retired/); then
`--resume DIR` runs exactly them again, at this commit, and summarizes the whole folder anew.

`method_a --extend DIR --seeds SEED [SEED ...] --reason TEXT` adds seeds to a finished method A folder's card
(tr2.extend: the card before, and the stage's summary and notebook, to retired/; the record to extended.jsonl); then
`--resume DIR` runs exactly the new seeds' runs and summarizes every seed.
"""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

from . import REPO_ROOT, RESULTS_DIR, Tr2Error
from .cards import card_path as card_path_of
from .cards import card_name, check_held_card, check_machine, load_card
from .results import STAGES, latest, new_results_dir, parse_folder_name
from .retire import retire
from .stage import DeadlineReached, deadline, hold_card
from .trainargs import Parser

# the exit code of a stage stopped by TR2_DEADLINE before a run (sysexits' EX_TEMPFAIL: try again later)
DEADLINE_EXIT = 75


def papermill_command(stage: str, card_path, results_dir, render: bool = False) -> list[str]:
    d = Path(results_dir)
    return [sys.executable, "-m", "papermill", str(REPO_ROOT / "notebooks" / f"{stage}.ipynb"),
            str(d / f"{stage}.ipynb"), "-f", str(card_path), "-p", "results_dir", str(d),
            *(["-p", "render_only", "True"] if render else []), "-k", "python3", "--log-output"]


def _resume_folder(stage: str, resume, flag: str = "--resume") -> Path:
    """The folder --resume (or --render) names, checked: a results folder this stage started (its name and its
    card.yaml)."""
    d = Path(resume)
    if not d.is_dir():
        raise Tr2Error(f"{flag}: {str(resume)!r} is not a folder; allowed: a results folder the stage started "
                       f"(results/{stage}-<stamp>-<card>/)")
    named = parse_folder_name(d.resolve())
    if named is not None and named.stage != stage:
        raise Tr2Error(f"{flag}: {str(resume)!r} is a folder of stage {named.stage}; allowed: a folder of stage {stage}")
    if named is None or not (d / "card.yaml").is_file():
        what = "holds no card.yaml" if named is not None else f"is not named {stage}-<stamp>-<card>"
        raise Tr2Error(f"{flag}: {str(resume)!r} {what}, so no stage started it; allowed: a results folder "
                       f"of stage {stage} (results/{stage}-<stamp>-<card>/)")
    return d.resolve()


def prepare_render(stage: str, render) -> tuple[dict, Path, Path]:
    """--render DIR: the stage and its folder checked (its card.yaml, and its summary.json: the stage ran to its end),
    the card read (and validated); nothing of this machine is checked and nothing is written: (card, folder, the card
    file papermill reads)."""
    if stage not in STAGES:
        raise Tr2Error(f"stage: {stage!r} is not allowed; allowed: {' | '.join(STAGES)}")
    d = _resume_folder(stage, render, "--render")
    if not (d / "summary.json").is_file():   # run() returned and summarize() ran: the stage reached its end
        raise Tr2Error(f"--render: {str(render)!r} holds no summary.json, so its stage has not run to its end; allowed: "
                       f"a folder whose runs are done (finish them with --resume {render} --runs-only)")
    return load_card(d / "card.yaml"), d, d / "card.yaml"


def run_here(stage: str, card: dict, d: Path) -> None:
    """--runs-only: the stage's runs and its summary in this process, as its notebook's cells call them."""
    module = importlib.import_module(f"tr2.{stage}")
    module.run(card, d)
    module.summarize(d)


def retire_here(stage: str, a) -> None:
    """--retire DIR --runs PATTERN... --reason TEXT: the folder checked as --resume checks it, then tr2.retire."""
    if stage not in STAGES:
        raise Tr2Error(f"stage: {stage!r} is not allowed; allowed: {' | '.join(STAGES)}")
    given = [f for f, v in (("--card", a.card), ("--resume", a.resume), ("--runs-only", a.runs_only),
                            ("--render", a.render)) if v]
    if given:
        raise Tr2Error(f"--retire: given with {given[0]}; allowed: --retire DIR --runs PATTERN [PATTERN ...] "
                       "--reason TEXT alone (then --resume DIR runs the retired runs again)")
    if not a.runs:
        raise Tr2Error("--runs: missing; allowed: one or more fnmatch patterns of run keys after --retire DIR "
                       "(e.g. --runs 'gpt2-small/bfloat16/cupy/*')")
    d = _resume_folder(stage, a.retire, "--retire")
    done = retire(stage, d, a.runs, a.reason)
    print(f"tr2.runner: retired {done['records']} record(s) of {len(done['keys'])} run(s) from {d} "
          f"({', '.join(done['keys'])}); {len(done['moves'])} file(s) moved under retired/, {done['kept']} record(s) "
          f"kept; run them again with: python -m tr2.runner {stage} --resume {d}", flush=True)


def extend_here(stage: str, a) -> None:
    """--extend DIR --seeds SEED... --reason TEXT: the stage and the folder checked as --resume checks them, then
    tr2.extend."""
    # here, not at the top: tr2.extend plans with tr2.method_a, whose pandas the runner's other paths need not load
    from .extend import check_stage, extend
    if stage not in STAGES:
        raise Tr2Error(f"stage: {stage!r} is not allowed; allowed: {' | '.join(STAGES)}")
    check_stage(stage)
    given = [f for f, v in (("--card", a.card), ("--resume", a.resume), ("--runs-only", a.runs_only),
                            ("--render", a.render), ("--retire", a.retire), ("--runs", a.runs)) if v]
    if given:
        raise Tr2Error(f"--extend: given with {given[0]}; allowed: --extend DIR --seeds SEED [SEED ...] --reason TEXT "
                       "alone (then --resume DIR runs the new seeds' runs)")
    d = _resume_folder(stage, a.extend, "--extend")
    done = extend(stage, d, a.seeds, a.reason)
    print(f"tr2.runner: {done['card_key']} of {d} extended from {done['before']} to {done['after']}; the card before "
          f"and the stage's summary and notebook kept under retired/ ({', '.join(done['extended_files'].values())}); "
          f"the resume runs {len(done['runs'])} run(s) ({', '.join(done['runs'])}): python -m tr2.runner {stage} "
          f"--resume {d}", flush=True)


def prepare(stage: str, card_path=None, resume=None, root=None) -> tuple[dict, Path, Path]:
    """Every check before the first run (the stage, the card, this machine and its data, the folder to resume),
    then the folder made or reused; (card, folder, the card file papermill reads)."""
    if stage not in STAGES:
        raise Tr2Error(f"stage: {stage!r} is not allowed; allowed: {' | '.join(STAGES)}")
    if not (REPO_ROOT / "notebooks" / f"{stage}.ipynb").is_file():
        raise Tr2Error(f"stage: {stage!r} has no notebook notebooks/{stage}.ipynb yet")
    d = _resume_folder(stage, resume) if resume else None
    if card_path is None and d is None:
        raise Tr2Error("--card: missing; allowed: a card file or name (params/cards/), or --resume DIR alone")
    held = load_card(d / "card.yaml") if d is not None else None
    card = load_card(card_path) if card_path is not None else held
    if d is not None and card_path is not None:
        check_held_card(d, card, "--resume", f"in {card_path}", "the card it was started with, or no --card")
    check_machine(card)
    deadline()   # a bad TR2_DEADLINE stops the stage at its first run, after the folder was made: checked here
    if d is None:
        if root is not None and Path(root).exists() and not Path(root).is_dir():
            raise Tr2Error(f"--root: {str(root)!r} is not a folder; allowed: a folder for the results folders")
        d = new_results_dir(stage, card["card"], root=root).resolve()
    (d / "logs").mkdir(exist_ok=True)
    hold_card(d, card, "--resume" if resume else "results_dir")  # card.yaml and machine.json, as the stage's
    # open_folder writes them (each once); a resumed folder's GPU model checked against this machine's first
    # papermill reads the card from the folder when resuming (the card it started with); the file the user
    # named (or the card file of the name) otherwise, so that an error names their file.
    file_ = card_path_of(card_path) if held is None else d / "card.yaml"
    return card, d, file_


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "latest":
            p = Parser(prog="python -m tr2.runner latest", description="Print the newest results folder of a stage and card.")
            p.add_argument("stage", help=" | ".join(STAGES))
            p.add_argument("--card", required=True, help="the card's name (or its file)")
            p.add_argument("--finished", action="store_true", help="only folders holding summary.json and the executed notebook")
            p.add_argument("--root", default=None, help="where the results folders are (default results/)")
            a = p.parse_args(argv[1:])
            if a.stage not in STAGES:
                raise Tr2Error(f"stage: {a.stage!r} is not allowed; allowed: {' | '.join(STAGES)}")
            name = card_name(a.card)
            found = latest(a.stage, name, a.root, a.finished)
            if found is None:
                sys.stderr.write(f"tr2.runner: no results folder of stage {a.stage} and card {name} "
                                 f"under {a.root or RESULTS_DIR}\n")
                return 1
            print(found)
            return 0
        p = Parser(prog="python -m tr2.runner", description="Run one protocol stage's notebook with papermill on a card.")
        p.add_argument("stage", help=" | ".join(STAGES) + "  (or: latest STAGE --card NAME)")
        p.add_argument("--card", default=None, help="a card file or name, e.g. params/cards/cpu.yaml or cpu "
                       "(with --resume: optional, the folder's card.yaml is the card)")
        p.add_argument("--resume", default=None, metavar="DIR", help="continue the stage in this results folder")
        p.add_argument("--runs-only", action="store_true", help="the stage's runs and summary here, without the "
                       "notebook (executed later by --render DIR, on any machine)")
        p.add_argument("--render", default=None, metavar="DIR", help="execute the stage's notebook over this "
                       "folder, running nothing (no GPU needed); with no other option")
        p.add_argument("--retire", default=None, metavar="DIR", help="take the runs --runs names out of this "
                       "results folder into its retired.jsonl and retired/ (nothing is deleted); --resume DIR then "
                       "runs them again")
        p.add_argument("--runs", nargs="+", default=None, metavar="PATTERN", help="with --retire: fnmatch patterns "
                       "of run keys, e.g. 'gpt2-small/bfloat16/cupy/*'")
        p.add_argument("--extend", default=None, metavar="DIR", help="method_a only: add the seeds --seeds names "
                       "to this finished folder's card (the card before kept under retired/, the record in "
                       "extended.jsonl); --resume DIR then runs their runs")
        p.add_argument("--seeds", nargs="+", default=None, metavar="SEED", help="with --extend: the seeds to add, "
                       "in order, none of the card's")
        p.add_argument("--reason", default=None, help="with --retire: why the runs are retired; with --extend: why "
                       "seeds are added (kept in each record)")
        p.add_argument("--root", default=None, help="where the new results folder is made (default results/); a "
                       "reproduction's own (the report's commands: results/repro/<folder>) keeps it apart from the "
                       "record, and `latest STAGE --card NAME --root ROOT` names it")
        a = p.parse_args(argv)
        if a.extend is not None:
            extend_here(a.stage, a)
            return 0
        if a.seeds is not None:
            raise Tr2Error("--seeds: given without --extend; allowed only with --extend DIR")
        if a.retire is not None:
            retire_here(a.stage, a)
            return 0
        for flag, value in (("--runs", a.runs), ("--reason", a.reason)):
            if value is not None:
                raise Tr2Error(f"{flag}: given without --retire; allowed only with --retire DIR"
                               + (" or --extend DIR" if flag == "--reason" else ""))
        if a.render is not None:
            given = [f for f, v in (("--card", a.card), ("--resume", a.resume), ("--runs-only", a.runs_only)) if v]
            if given:
                raise Tr2Error(f"--render: given with {given[0]}; allowed: --render DIR alone (the folder's "
                               f"card.yaml is the card)")
            card, d, card_file = prepare_render(a.stage, a.render)
        else:
            card, d, card_file = prepare(a.stage, a.card, a.resume, a.root)
        if a.runs_only:
            print(d, flush=True)
            run_here(a.stage, card, d)
            print(f"tr2.runner: {a.stage}'s runs are in {d}; show them with: python -m tr2.runner {a.stage} "
                  f"--render {d}", flush=True)
            return 0
    except DeadlineReached as e:   # not an error: the call's time is up before the next run
        sys.stderr.write(f"tr2.runner: {e}\n")
        return DEADLINE_EXIT
    except Tr2Error as e:
        sys.stderr.write(f"tr2.runner: error: {e}\n")
        return 2
    print(d, flush=True)
    cmd = papermill_command(a.stage, Path(card_file).resolve(), d, render=a.render is not None)
    rc = subprocess.call(cmd, cwd=REPO_ROOT)
    if rc != 0:
        sys.stderr.write(f"tr2.runner: papermill exited {rc}; the executed notebook is {d / (a.stage + '.ipynb')}; "
                         f"continue with --resume {d}\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
