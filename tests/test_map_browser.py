"""The map page in a real browser: Debian's Chromium, driven by Selenium, with no network.

The page of a small labelled corpus (``sphdist layout`` then ``sphdist map``) is opened from
its file with the network off (DevTools' offline mode, and every host resolving to nothing):
it loads, draws one point per document with a direction through WebGL, shows the right
tooltip when the pointer is on a known document, and, clicked, highlights exactly the
neighbours ``sphdist neighbors --doc-id`` returns for it. The search box finds a document by
its id. Skipped, with the reason, where Chromium, chromedriver or Selenium is missing
(``apt-get install chromium chromium-driver``; ``pip install selenium``).
"""

from __future__ import annotations

import json
import shutil
import time

import numpy as np
import pytest
import zarr

from sphdist.io.model import open_model
from tests._cli_stores import cli_ok, working_directory

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

try:
    import selenium  # noqa: F401
except ImportError:  # pragma: no cover - the test extra installs it
    SELENIUM = False
else:
    SELENIUM = True

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SELENIUM, reason="selenium is not installed (the test extra)"),
    pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                       reason="no chromium and chromedriver on PATH (Debian: apt-get install "
                              "chromium chromium-driver)"),
]

N_DOCS = 240
START_WAIT = 60  # seconds: a loaded machine starts Chromium slowly

# Every view of the page, depth first; the plot ("map") and the points' renderer ("points").
_VIEWS = """
function walk(v, out) {
  out.push(v);
  for (const c of (v.child_views || [])) walk(c, out);
  if (v.renderer_views) for (const r of v.renderer_views.values()) walk(r, out);
  return out;
}
const all = [];
for (const v of Object.values(Bokeh.index)) walk(v, all);
const plot = all.find(v => v.model.name === 'map');
const points = all.find(v => v.model.name === 'points');
const documents = Bokeh.documents[0].get_model_by_name('documents');
"""

_TOOLTIPS = """
function rows(root, out) {
  for (const el of root.querySelectorAll('*')) {
    if (el.shadowRoot) rows(el.shadowRoot, out);
    const cls = (el.className || '').toString();
    if (cls.includes('bk-tooltip-row-label') || cls.includes('bk-tooltip-row-value'))
      out.push(el.innerText.trim());
  }
  return out;
}
return rows(document, []);
"""


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    where = tmp_path_factory.mktemp("browser")
    with working_directory(where):
        cli_ok("synth", "--n-docs", N_DOCS, "--n-topics", 3, "--vocab-size", 200,
               "--format", "jsonl", "-o", "s.jsonl")
        cli_ok("ingest", "s.jsonl", "--label-field", "label", "-o", "c.zarr")
        cli_ok("fit", "-i", "c.zarr", "-o", "m.zarr", "-r", 4, "--max-iter", 30)
        cli_ok("layout", "-m", "m.zarr")
        cli_ok("map", "-m", "m.zarr", "-o", "map.html")
    return where


@pytest.fixture(scope="module")
def browser(page, tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1200,900", "--enable-unsafe-swiftshader",
                "--proxy-server=127.0.0.1:9",
                "--host-resolver-rules=MAP * ~NOTFOUND"):
        options.add_argument(arg)
    # A profile of its own under pytest's temporary folder: left to itself, Chromium makes
    # /tmp/org.chromium.Chromium.* and leaves it behind at every run.
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.set_network_conditions(offline=True, latency=0, throughput=0)
        driver.get((page / "map.html").as_uri())
        deadline = time.monotonic() + START_WAIT
        while not driver.execute_script(
                "return typeof Bokeh !== 'undefined' && Bokeh.documents.length > 0 && "
                "Object.keys(Bokeh.index).length > 0"):
            assert time.monotonic() < deadline, "the page did not render within a minute"
            time.sleep(0.2)
        driver.page = page  # for the tests that open another page after the shared one
        yield driver
    finally:
        driver.quit()


def _isolated_document(page):
    """The document whose nearest other point on the map is farthest: one point per pixel."""
    xy = zarr.open_group(str(page / "m.layout.zarr"), mode="r")["xy"][...].T
    d = np.linalg.norm(xy[:, None, :] - xy[None, :, :], axis=2)
    np.fill_diagonal(d, np.inf)
    return int(np.argmax(d.min(axis=1)))


def _screen_point(driver, i):
    """Where document row ``i`` is drawn, in the page's viewport (CSS pixels)."""
    return driver.execute_script(_VIEWS + """
        const i = arguments[0];
        const rect = plot.canvas_view.el.getBoundingClientRect();
        return [rect.left + plot.frame.x_scale.compute(documents.data.x[i]),
                rect.top + plot.frame.y_scale.compute(documents.data.y[i])];
    """, i)


def _pointer(driver, at, click=False):
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    actions = ActionBuilder(driver)
    actions.pointer_action.move_to_location(int(round(at[0])), int(round(at[1])))
    if click:
        actions.pointer_action.click()
    actions.perform()


def _wait(predicate, what, seconds=20):
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_the_page_draws_every_document_with_webgl_offline(browser, page):
    drawn = browser.execute_script(_VIEWS + """
        return {n: documents.data.x.length, size: points.glyph.data_size,
                webgl: !!points.glyph.glglyph, ids: documents.data.id.slice(0, 3)};
    """)
    assert drawn["n"] == N_DOCS and drawn["size"] == N_DOCS
    assert drawn["webgl"], "the points are not drawn through WebGL"
    ids = [json.loads(line)["id"] for line in (page / "s.jsonl").read_text().splitlines()]
    assert drawn["ids"] == ids[:3]


def test_hover_shows_the_id_label_and_terms_of_a_known_document(browser, page):
    i = _isolated_document(page)
    docs = [json.loads(line) for line in (page / "s.jsonl").read_text().splitlines()]
    model = open_model(page / "m.zarr")
    V = model.V().compute()
    W = model.U @ (V[:, i] - V.mean(axis=1))  # NumPy: the heaviest terms of its deviation
    terms = ", ".join(model.vocabulary[np.argsort(-W)[:4]])
    _pointer(browser, _screen_point(browser, i))
    rows = _wait(lambda: browser.execute_script(_TOOLTIPS), "no tooltip appeared")
    assert rows[:6] == ["id:", docs[i]["id"], "label:", docs[i]["label"], "terms:", terms]


def test_a_click_highlights_exactly_the_neighbours_sphdist_neighbors_returns(browser, page):
    i = _isolated_document(page)
    doc_id = json.loads((page / "s.jsonl").read_text().splitlines()[i])["id"]
    with working_directory(page):
        found = json.loads(cli_ok("neighbors", "-m", "m.zarr", "--doc-id", doc_id, "-k", 10,
                                  "--json").output)
    expected = sorted(hit["doc_id"] for hit in found["neighbors"])
    _pointer(browser, _screen_point(browser, i), click=True)
    shown = _wait(lambda: browser.execute_script(
        "return Bokeh.documents[0].get_model_by_name('highlight').data.id"),
        "the click highlighted nothing")
    assert sorted(shown) == expected
    assert browser.execute_script(
        "return Bokeh.documents[0].get_model_by_name('documents').selected.indices") == [i]
    status = browser.execute_script(
        "return Bokeh.documents[0].get_model_by_name('status').text")
    assert doc_id in status and all(d in status for d in expected)


def test_the_search_box_finds_a_document_by_id(browser, page):
    from selenium.webdriver.common.keys import Keys

    lines = (page / "s.jsonl").read_text().splitlines()
    j = N_DOCS // 2
    doc_id = json.loads(lines[j])["id"]
    box = _wait(lambda: browser.execute_script("""
        function find(root) {
          for (const el of root.querySelectorAll('*')) {
            if (el.tagName === 'INPUT' && el.placeholder === 'document id') return el;
            if (el.shadowRoot) { const f = find(el.shadowRoot); if (f) return f; }
          }
          return null;
        }
        return find(document);
    """), "no search box")
    box.clear()
    box.send_keys(doc_id, Keys.ENTER)
    _wait(lambda: browser.execute_script(
        "return Bokeh.documents[0].get_model_by_name('documents').selected.indices"
        ".join(',') === arguments[0]", str(j)), "the search selected nothing")
    shown = browser.execute_script(
        "return Bokeh.documents[0].get_model_by_name('highlight').data.id")
    assert len(shown) == 10 and doc_id not in shown


def test_an_id_that_looks_like_html_is_shown_as_text(tmp_path, browser):
    # the line under the map is HTML: a document id is escaped there, never markup
    marked = '<img src=x onerror="window.injected=1">'
    lines = [json.loads(line) for line in
             (browser.page / "s.jsonl").read_text().splitlines()][:60]
    lines[5]["id"] = marked
    lines[7]["label"] = marked.replace("=1", "=2")  # a group of the legend, under the map
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps(d) for d in lines) + "\n")
    with working_directory(tmp_path):
        cli_ok("ingest", "s.jsonl", "--label-field", "label", "-o", "c.zarr")
        cli_ok("fit", "-i", "c.zarr", "-o", "m.zarr", "-r", 3, "--max-iter", 20)
        cli_ok("layout", "-m", "m.zarr", "-k", 5)
        cli_ok("map", "-m", "m.zarr", "-o", "map.html")
    browser.get((tmp_path / "map.html").as_uri())
    _wait(lambda: browser.execute_script(
        "return typeof Bokeh !== 'undefined' && Bokeh.documents.length > 0 && "
        "Object.keys(Bokeh.index).length > 0"), "the page did not render")
    browser.execute_script(
        "Bokeh.documents[0].get_model_by_name('documents').selected.indices = [5]")
    status = _wait(lambda: browser.execute_script(
        "return Bokeh.documents[0].get_model_by_name('status').text"), "no status line")
    assert "&lt;img" in status and "<img" not in status
    legend = browser.execute_script(
        "return Bokeh.documents[0].get_model_by_name('legend').text")
    assert "&lt;img" in legend and "<img" not in legend
    assert browser.execute_script("return window.injected === undefined")


# Counts the paints of every Bokeh plot (PlotView._actual_paint, Bokeh 3), installed before
# the page's scripts run: once Bokeh's main bundle has set window.Bokeh.
_COUNT_PAINTS = """
window.__paints = 0;
let bokeh;
Object.defineProperty(window, "Bokeh", {configurable: true, get() { return bokeh; }, set(v) {
  bokeh = v;
  queueMicrotask(() => {
    const view = v.Models.get("Plot").prototype.default_view.prototype;
    const paint = view._actual_paint;
    view._actual_paint = function (...args) {
      window.__paints += 1;
      return paint.apply(this, args);
    };
  });
}});
"""


def test_the_points_are_painted_once_and_the_legend_names_every_group(browser, page):
    """One paint of the WebGL points when the page opens (each is seconds of software WebGL
    at 100,000 points; Bokeh's own Legend asked for a second, pipelines/results/map.md), and
    the legend under the map gives each label its colour."""
    hook = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                                   {"source": _COUNT_PAINTS})
    try:
        browser.get((page / "map.html").as_uri())
        _wait(lambda: browser.execute_script(_VIEWS + """
            return window.__paints >= 1 && points.glyph.data_size === arguments[0]
                   && Object.values(Bokeh.index).every(v => v.has_finished());""", N_DOCS),
              "the page was not drawn", seconds=START_WAIT)
        browser.set_script_timeout(30)
        browser.execute_async_script(  # two frames and a second: where a repaint would be
            "const done = arguments[0];"
            "requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(done, 1000)));")
        assert browser.execute_script("return window.__paints") == 1
    finally:
        browser.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument",
                                {"identifier": hook["identifier"]})
    legend = browser.execute_script(
        "return Bokeh.documents[0].get_model_by_name('legend').text")
    labels = {json.loads(line)["label"] for line in (page / "s.jsonl").read_text().splitlines()}
    colours = browser.execute_script(_VIEWS + """
        const cmap = points.model.glyph.fill_color.transform;
        return Object.fromEntries(cmap.factors.map((f, i) => [f, cmap.palette[i]]));""")
    assert set(colours) == labels
    for label, colour in colours.items():
        assert f"color:{colour};" in legend and f"</span> {label}</span>" in legend
