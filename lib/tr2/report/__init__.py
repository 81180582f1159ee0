"""TR-2, stitched: `python -m tr2.report --card NAME [--dirs DIR ...] [--out report/TR-2.html] [--beside DIR ...]`.

Three parts: `verdicts` chooses the results folders (default: the newest finished folder of each stage for
the card) and computes the verdict table from their files (pure; written beside the HTML as
`TR-2-<card>.json`); `front` fills the front page from that table with a Jinja template; `stitch` puts the
front page and each folder's executed `<stage>.ipynb` into one offline HTML file.

The rules the front page applies:
- the speed of a configuration (its times, the ratio and the verdict) is published only where both
  correctness checks passed: method A for its model and element type, method B for its model;
  elsewhere the row says why it is withheld;
- the verdict is the series' own (tr2.series.compare), stated in the words tr2.series gives it;
- every number carries its conditions (runs, median, range and spread, card, machine, versions, date,
  commit), the command that reproduces it, and a link, relative to the HTML file, to its results folder;
- a report of a card whose device is the CPU says at its top that it is a CPU demonstration, not a
  measurement of a GPU.
"""
import sys
from pathlib import Path

from .. import Tr2Error
from ..cards import card_name
from ..trainargs import Parser, check_output_path
from .front import front_page_html  # noqa: F401
from .stitch import DEFAULT_OUT, build_report, export_html, merge, relative_paths, remote_urls, tidy_dataframe_html  # noqa: F401
from .verdicts import build_table, choose_dirs, unstitched  # noqa: F401


def main(argv=None) -> int:
    p = Parser(prog="python -m tr2.report", description="Stitch the executed notebooks of a card's results "
                "folders into one offline HTML report behind the front page (TR-2).")
    p.add_argument("--card", required=True, help="the card's name (or its file)")
    p.add_argument("--dirs", nargs="+", default=None, metavar="DIR",
                   help="results folders to stitch (default: the newest finished folder of each stage for the card)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="the HTML file (default report/TR-2.html); the verdict "
                   "table's data goes beside it as TR-2-<card>.json")
    p.add_argument("--root", default=None, help="where the results folders are (default results/)")
    p.add_argument("--beside", nargs="+", default=None, metavar="DIR",
                   help="finished method_a or method_b folders of other cards (a replication, a model the card leaves "
                        "out), shown beside the card's checks; they change none of its verdicts")
    a = p.parse_args(argv)
    try:
        # the page and its JSON are written after every folder is read: a bad --out would waste that, or make a folder
        check_output_path("--out", a.out, ".html", make_folder=True)
        for flag, dirs in (("--dirs", a.dirs), ("--beside", a.beside)):
            seen = set()
            for d in dirs or ():   # the same folder twice would be stitched, and counted, twice
                if Path(d).resolve() in seen:
                    raise Tr2Error(f"{flag}: {d!r} given twice; allowed: each folder once")
                seen.add(Path(d).resolve())
        card = card_name(a.card)
        html_path, json_path = build_report(card, a.dirs, a.out, a.root, a.beside)
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

