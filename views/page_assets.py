"""The script and style of the runs page (`views.run_table_render`): uPlot
(views/static/vendor/, MIT, see uPlot.LICENSE) for the curves, and static/runs_page.js /
static/runs_page.css for the table, filter, pickers and polling. All of it is inlined
into the page: sweep.html opens from disk, offline, and the dashboard fetches nothing
but runs.json.

uPlot (1.6.32, ~50 kB) rather than hand-written SVG or plotly (4.6 MB): it is made for
many long time series (canvas, not one DOM node per point) and brings the hover readout,
drag zoom, log axes and point markers the page needs.

The files are package data (pyproject.toml's [tool.setuptools.package-data]), read
through importlib.resources so that an installed wheel finds them as a checkout does.
"""

from importlib.resources import files

STATIC = "static"
STYLE_FILES = ("vendor/uPlot.min.css", "runs_page.css")
SCRIPT_FILES = ("vendor/uPlot.iife.min.js", "runs_page.js")


def read_static(names: tuple[str, ...], package: str = __package__) -> str:
    """The files under `package`'s static/ folder, joined; a missing one raises
    FileNotFoundError naming it (a wheel built without its package data)."""
    folder = files(package).joinpath(STATIC)
    return "\n".join(folder.joinpath(name).read_text(encoding="utf-8") for name in names)


# `</script>` cannot occur in these files (checked by tests/unit/test_views_page_assets.py).
STYLE = read_static(STYLE_FILES)
SCRIPT = read_static(SCRIPT_FILES)
