"""python -m tr2.report --card NAME [--dirs DIR ...] [--out report/TR-2.html]: TR-2, stitched."""
from __future__ import annotations

import sys

from .. import Tr2Error
from ..cards import card_name
from ..trainargs import Parser
from .stitch import DEFAULT_OUT, build_report
from .verdicts import unstitched


def main(argv=None) -> int:
    p = Parser(prog="python -m tr2.report", description="Stitch the executed notebooks of a card's results "
                "folders into one offline HTML report behind the front page (TR-2).")
    p.add_argument("--card", required=True, help="the card's name (or its file)")
    p.add_argument("--dirs", nargs="+", default=None, metavar="DIR",
                   help="results folders to stitch (default: the newest finished folder of each stage for the card)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="the HTML file (default report/TR-2.html); the verdict "
                   "table's data goes beside it as TR-2-<card>.json")
    p.add_argument("--root", default=None, help="where the results folders are (default results/)")
    a = p.parse_args(argv)
    try:
        card = card_name(a.card)
        html_path, json_path = build_report(card, a.dirs, a.out, a.root)
        if not a.dirs:
            for d in unstitched(card, a.root):
                sys.stderr.write(f"tr2.report: note: {d.name} holds summary.json but no executed notebook, so it is "
                                 f"not stitched; run the stage with `make {d.name.split('-')[0].replace('_', '-')} "
                                 f"CARD={card}` (or papermill with OUTPUT inside the folder, see README)\n")
    except Tr2Error as e:
        sys.stderr.write(f"tr2.report: error: {e}\n")
        return 2
    print(html_path)
    print(json_path)
    return 0

