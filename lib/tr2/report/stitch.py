"""Stitching: the front page and each folder's executed stage notebook in one HTML file that reads offline."""
from __future__ import annotations

import base64
import copy
import mimetypes
import os
import re
from pathlib import Path

import jinja2
import nbformat
from nbconvert import HTMLExporter

from .. import REPO_ROOT, Tr2Error
from ..results import conditions, dirty_text, folder_path, write_json_atomic, write_text_atomic
from .front import STAGE_TITLES, front_page_html
from .verdicts import build_table, choose_dirs, commands

DROP_TAGS = {"parameters", "injected-parameters"}
DEFAULT_OUT = REPO_ROOT / "report" / "TR-2.html"

# nbconvert's lab template without any remote script: no require.js, no MathJax, no mermaid, no widgets
OFFLINE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""
_REMOTE = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*["']?(?:https?:)?//[^"'\s>]+""", re.I)
_CSS_REMOTE = re.compile(r"""@import\s+(?:url\()?["']?(?:https?:)?//|url\(\s*["']?(?:https?:)?//""", re.I)


# An absolute path of the machine that ran a stage, up to the repository's own folders: cut to the part
# inside the repository, so that the report names no machine's layout (and reads the same anywhere).
_ABS_PATH = re.compile(r"(?<![\w.~-])/(?:[\w.+@~-]+/)+?(?=(?:results|lib|params|notebooks|report|scripts|docs|\.venv)/)")
_SITE = re.compile(r"(?<![\w.~-])/(?:[\w.+@~-]+/)+?(?=(?:site|dist)-packages/)")


def relative_paths(text: str) -> str:
    """Absolute paths cut to the repository's (results/..., lib/...) or an installed package's (site-packages/...)."""
    return _SITE.sub("", _ABS_PATH.sub("", text))


_DF_TABLE = re.compile(r'<table border="1" class="dataframe[^"]*">.*?</table>', re.S)
_ROW_HEAD = re.compile(r"(<tr[^>]*>)\s*<th[^>]*>[^<]*</th>")
_NAN_CELL = re.compile(r"<td>\s*(?:NaN|None|NaT|nan|&lt;NA&gt;)\s*</td>")
_NUM_CELL = re.compile(r"<td>\s*(-?\d+\.\d+(?:e[+-]?\d+)?)\s*</td>")


def _sig(m) -> str:
    x = float(m.group(1))
    return f"<td>{x:.4g}</td>" if abs(x) < 1e15 else m.group(0)


def tidy_dataframe_html(text: str) -> str:
    """A pandas table as a reader wants it: no index column (the row numbers say nothing), empty cells for
    NaN/None, and four significant digits for every decimal (the runs do not resolve more)."""
    def fix(m):
        t = m.group(0)
        body = t.split("<tbody>", 1)[-1]
        labels = [x.group(0).rsplit(">", 2)[-2].split("<")[0].strip() for x in _ROW_HEAD.finditer(body)]
        head = t.split("<tbody>", 1)[0]
        # Row numbers (pandas' default index, kept through a sort or a filter, '...' where it is cut) say
        # nothing; an index with a name (its own header row) or with labels stays.
        if head.count("<tr") == 1 and labels and all(x.isdigit() or x == "..." for x in labels):
            t = _ROW_HEAD.sub(r"\1", t)
        t = _NAN_CELL.sub("<td></td>", t)
        return _NUM_CELL.sub(_sig, t)
    return _DF_TABLE.sub(fix, text)


_MD_TARGET = re.compile(r"(!?)\[([^\]]*)\]\(\s*([^)\s]+)([^)]*)\)")
_HTML_TARGET = re.compile(r"""\b(src|href)=(["'])([^"']+)\2""")


def rewrite_links(text: str, folder, html_dir) -> str:
    """A stage notebook's relative targets, meant from its results folder, made right from the HTML file:
    an image the folder holds is embedded (a data: URI), a link becomes relative to html_dir."""
    folder, html_dir = Path(folder), Path(html_dir)

    def fix(target: str, image: bool) -> str:
        if target.startswith(("#", "/", "data:", "mailto:")) or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target):
            return target   # not relative
        path = (folder / target).resolve()
        if image and path.is_file():
            mime = mimetypes.guess_type(str(path))[0] or "application/octet-stream"
            return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode("ascii")
        rel = os.path.relpath(path, html_dir.resolve()).replace(os.sep, "/")
        return rel + ("/" if target.endswith("/") and not rel.endswith("/") else "")

    text = _MD_TARGET.sub(lambda m: f"{m.group(1)}[{m.group(2)}]({fix(m.group(3), bool(m.group(1)))}{m.group(4)})", text)
    return _HTML_TARGET.sub(lambda m: f"{m.group(1)}={m.group(2)}{fix(m.group(3), m.group(1) == 'src')}{m.group(2)}", text)


# A stage notebook's paragraph about its parameters cell ("The defaults below are the `smoke` card's: a tiny model
# on the CPU ..."): the report drops that cell (DROP_TAGS), so the paragraph would speak of nothing below it and tell
# a reader of a GPU report that it shows a tiny model on the CPU. Dropped with it; the card the folder ran is shown.
_DEFAULTS_NOTE = re.compile(r"^The defaults below are\b")


def drop_defaults_note(source: str) -> str:
    """A markdown cell without its paragraphs (blank-line separated) that describe the dropped parameters cell."""
    paras = re.split(r"\n[ \t]*\n", source)
    kept = [x for x in paras if not _DEFAULTS_NOTE.match(x.strip())]
    return source if len(kept) == len(paras) else "\n\n".join(kept).rstrip() + ("\n" if source.endswith("\n") else "")


# The conditions table a stage notebook shows (explore.condition_table): its row of the working tree state, which
# notebooks executed before results.conditions made the state tri-state show as False where machine.json says "unknown", and
# later ones as None (an empty cell on the page). The page shows the folder's machine.json as results.dirty_text reads it.
_DIRTY_ROW_HTML = re.compile(r"(<tr>\s*<th>dirty</th>\s*<td>)[^<]*(</td>)")
_DIRTY_ROW_TEXT = re.compile(r"^dirty[ \t]+\S.*$", re.M)


def dirty_row(text: str, state, html: bool) -> str:
    """A conditions table's dirty row saying the folder's recorded state (results.dirty_text), not the notebook's."""
    said = dirty_text(state)
    if html:
        return _DIRTY_ROW_HTML.sub(lambda m: m.group(1) + said + m.group(2), text)
    return _DIRTY_ROW_TEXT.sub(lambda m: "dirty    " + said, text)


def _keep_cells(nb, folder=None, html_dir=None) -> list:
    out = []
    state = conditions(folder)["dirty"] if folder is not None else None
    for cell in nb.cells:
        if DROP_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        cell = copy.deepcopy(cell)
        if cell.cell_type == "markdown":
            cell.source = drop_defaults_note(cell.source)
            if not cell.source.strip():
                continue
        if folder is not None and cell.cell_type == "markdown":
            cell.source = relative_paths(rewrite_links(cell.source, folder, html_dir))
        if cell.cell_type == "code":
            outs = []
            for o in cell.get("outputs", []):
                if o.get("output_type") in ("display_data", "execute_result"):
                    data = o.get("data", {})
                    data.pop("application/vnd.jupyter.widget-view+json", None)
                    data.pop("application/javascript", None)
                    if not data:
                        continue
                    for mime in ("text/html", "text/plain", "text/markdown"):
                        if isinstance(data.get(mime), str):
                            text = relative_paths(rewrite_links(data[mime], folder, html_dir)
                                                  if folder and mime != "text/plain" else data[mime])
                            if folder is not None and mime != "text/markdown":
                                text = dirty_row(text, state, mime == "text/html")
                            data[mime] = tidy_dataframe_html(text) if mime == "text/html" else text
                if o.get("output_type") == "stream":
                    # stderr here is progress bars and library chatter, not errors (a failed cell stops the
                    # stage): shown as plain output, the bar at its last state (what its last carriage return left on
                    # each line), never as a red stderr block
                    o["name"] = "stdout"
                    lines = o.get("text", "").split("\n")
                    o["text"] = relative_paths("\n".join(line.rsplit("\r", 1)[-1] for line in lines))
                    if not o["text"].strip():
                        continue
                outs.append(o)
            cell["outputs"] = outs
        out.append(cell)
    return out


def stage_header(info) -> str:
    c = info["conditions"]
    # the working tree state: nothing where git recorded a clean tree, else what it was or that it was not recorded
    tree = "" if c.get("dirty") is False else f" ({dirty_text(c.get('dirty'))})"
    return (f'<a id="stage-{info["name"]}"></a>\n\n---\n\n'
            f'**{STAGE_TITLES.get(info["stage"], info["stage"])}.** '
            f'Results folder (raw data): [{info["name"]}]({info["link"]}) · card `{c.get("card")}` · '
            f'{c.get("gpu") or c.get("device")} · {c.get("date")} · commit `{(c.get("commit") or "none")[:12]}`'
            f'{tree}. The stage\'s executed notebook '
            f'(`{info["stage"]}.ipynb` in that folder) follows, its code hidden.')


def merge(front_html: str, stage_nbs, html_dir=None) -> nbformat.NotebookNode:
    """One notebook: the front page (one HTML output), then per stage a header and its cells (parameters
    dropped; relative links and images of a stage, meant from its folder, made right from html_dir)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "language_info": {"name": "python"}}
    cells = [nbformat.v4.new_code_cell("", outputs=[nbformat.v4.new_output("display_data",
                                                                            data={"text/html": front_html})])]
    for info, snb in stage_nbs:
        cells.append(nbformat.v4.new_markdown_cell(stage_header(info)))
        folder = info.get("path") and folder_path(info["path"])
        cells.extend(_keep_cells(snb, folder, html_dir or DEFAULT_OUT.parent) if folder else _keep_cells(snb))
    for i, cell in enumerate(cells):
        cell["id"] = f"tr2-{i}"
        cell.get("metadata", {}).pop("papermill", None)
        if cell.cell_type == "code":
            cell.setdefault("execution_count", None)
    nb.cells = cells
    return nb


def export_html(nb, title: str) -> str:
    exporter = HTMLExporter(template_name="lab", template_file="tr2_offline.html.j2", exclude_input=True,
                            exclude_input_prompt=True, exclude_output_prompt=True, embed_images=True, anchor_link_text="",
                            extra_loaders=[jinja2.DictLoader({"tr2_offline.html.j2": OFFLINE_TEMPLATE})])
    nb.metadata["title"] = title
    return exporter.from_notebook_node(nb)[0]


def remote_urls(text: str) -> list[str]:
    """Remote resources an HTML page would fetch: scripts, stylesheets, images, frames, CSS imports."""
    return [m.group(0) for m in _REMOTE.finditer(text)] + [m.group(0) for m in _CSS_REMOTE.finditer(text)]


def page_title(card: str, data: dict) -> str:
    """The HTML's title: the card, and what its front page's banner says it is (protocol rule 9)."""
    if data["cpu_demonstration"]:
        return f"TR-2 ({card}) - a CPU demonstration, not a GPU measurement"
    if data.get("preview"):
        return f"TR-2 ({card}) - a preview, not the published protocol"
    if data.get("edition"):
        return f"TR-2 ({card}) - the published edition of {data['edition']['published']}, reduced"
    return f"TR-2 ({card})"


def build_report(card: str, dirs=None, out=None, root=None, beside=None) -> tuple[Path, Path]:
    """Write the HTML and the verdict table's JSON; returns their paths. beside: folders of other cards' checks
    shown beside the card's own (verdicts.beside_checks)."""
    out = Path(out or DEFAULT_OUT).resolve()
    chosen = choose_dirs(card, dirs, root)
    data = build_table(card, chosen, out.parent, beside)
    # the report's own command names the file it writes (else it would write the default report/TR-2.html)
    data["commands"] = commands(card, data["folders"], out.parent, data["beside"], out=out)
    stage_nbs = [(info, nbformat.read(str(p), as_version=4)) for info, d in zip(data["folders"], chosen)
                 if (p := Path(d) / f"{info['stage']}.ipynb").is_file()]
    nb = merge(front_page_html(data), stage_nbs, out.parent)
    text = export_html(nb, page_title(card, data))
    if bad := remote_urls(text):
        raise Tr2Error(f"report: the HTML would fetch {bad[0]!r}; allowed: an offline page (no remote resource)")
    json_path = write_json_atomic(out.parent / f"TR-2-{card}.json", data)
    write_text_atomic(out, text)
    return out, Path(json_path)
