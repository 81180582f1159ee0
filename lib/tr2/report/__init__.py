"""TR-2, stitched: `python -m tr2.report --card NAME [--dirs DIR ...] [--out report/TR-2.html]`.

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
from .cli import main
from .front import front_page_html
from .stitch import DEFAULT_OUT, build_report, export_html, merge, relative_paths, remote_urls, tidy_dataframe_html
from .verdicts import build_table, choose_dirs, unstitched

__all__ = ["DEFAULT_OUT", "build_report", "build_table", "choose_dirs", "export_html", "front_page_html",
           "main", "merge", "relative_paths", "remote_urls", "tidy_dataframe_html", "unstitched"]
