"""python -m tr2.train: one trainer for every side. Bad arguments stop with one line and exit 2, before any work."""
from __future__ import annotations

import sys

from . import Tr2Error
from .models import load_model
from .trainargs import TrainArgs, parse


def run(args: TrainArgs) -> int:
    overrides = {} if args.dropout is None else {"dropout": args.dropout}
    cfg = load_model(args.model, **overrides)
    if args.side == "torch":
        from .torch_side.train import run as run_side
    elif args.side == "nanogpt":
        from .nanogpt_side import run as run_side
    else:
        from .cupy_side.train import run as run_side
    return run_side(args, cfg)


def main(argv=None) -> int:
    try:
        args = parse(argv)
        return run(args)
    except Tr2Error as e:
        sys.stderr.write(f"tr2.train: error: {e}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
