"""Sphinx configuration of the sphdist documentation.

Built offline (no intersphinx, no network) and with warnings as errors in the test suite
(``tests/test_docs.py``):

    sphinx-build -W --keep-going -b html docs docs/_build/html
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import sphdist

ROOT = Path(__file__).resolve().parent.parent

project = "sphdist"
author = "the sphdist developers"
copyright = "the sphdist developers"  # noqa: A001 (Sphinx's name)
release = sphdist.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "numpydoc",
    "sphinx_click",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = ["_build"]
default_role = "literal"
smartquotes = False  # options and help texts are shown as typed: "exact", --tol, not “exact”, –tol

# -- cross-references: every reference to sphdist must resolve --------------------------------
# Broken references are errors (-W); types of other libraries are named in docstrings but not
# linked (no intersphinx: the build must not reach the network).
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(numpy|np|scipy|sklearn|dask|da|distributed|zarr|fsspec|upath|click|pandas|"
     r"pyarrow|matplotlib|tqdm|filelock|os|io|pathlib|collections|typing|concurrent|"
     r"threading|logging|numbers|json|tarfile|gzip|re|datetime|types|abc|enum|"
     r"dataclasses|contextlib|subprocess|socket|ssl|cryptography)(\..*)?"),
    # private modules and helpers that docstrings name for the reader of the source: they are
    # not part of the API reference
    (r"py:.*", r"(.*\.)?_[A-Za-z][^.]*(\..*)?"),
]
# The References sections list the papers a docstring cites by author and year; they are
# not all cited with [1]_ markers.
suppress_warnings = ["ref.citation", "myst.header"]

# -- autodoc / autosummary / numpydoc ----------------------------------------------------------
autosummary_generate = True
autosummary_ignore_module_all = False


def public_api(modname: str) -> dict[str, list[str]]:
    """The public names of a module, by kind, for its API page (``_templates/autosummary``).

    The names in ``__all__``, then the functions and classes the module defines whose names
    do not start with an underscore, then its constants with a ``#:`` doc comment. The
    estimators are listed apart: they are documented once, as ``sphdist.<Estimator>``.
    """
    from sphinx.pycode import ModuleAnalyzer

    module = importlib.import_module(modname)
    names = list(getattr(module, "__all__", ()))
    for name, obj in vars(module).items():
        defined = getattr(obj, "__module__", None) == modname
        if defined and (inspect.isclass(obj) or inspect.isfunction(obj)):
            names.append(name)
    names += [name for (space, name) in ModuleAnalyzer.for_module(modname).find_attr_docs()
              if not space]
    api: dict[str, list[str]] = {
        "estimators": [], "functions": [], "classes": [], "exceptions": [], "data": [],
    }
    for name in dict.fromkeys(names):
        obj = getattr(module, name)
        if name.startswith("_") or inspect.ismodule(obj):
            continue
        if name in sphdist._ESTIMATORS:
            kind = "estimators"
        elif inspect.isclass(obj) and issubclass(obj, BaseException):
            kind = "exceptions"
        elif inspect.isclass(obj):
            kind = "classes"
        elif callable(obj) and (inspect.isfunction(obj) or hasattr(obj, "__wrapped__")):
            kind = "functions"
        else:
            kind = "data"
        api[kind].append(name)
    return api


def _public_modules() -> list[str]:
    """Every module of sphdist whose dotted name has no part starting with an underscore."""
    import pkgutil

    return ["sphdist"] + [
        info.name for info in pkgutil.walk_packages(sphdist.__path__, "sphdist.")
        if not any(part.startswith("_") for part in info.name.split("."))
    ]


#: Plain data (the configuration is pickled): each public module's names by kind.
autosummary_context = {"api": {name: public_api(name) for name in _public_modules()}}
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"  # numpydoc's Parameters sections say the types
autodoc_preserve_defaults = True  # signatures show `table=PARAMS`, not the table's repr
autoclass_content = "class"

numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()

# -- doctest -----------------------------------------------------------------------------------
# Only the examples of the pages (``doctest`` directives) run here; the docstrings' examples
# run under pytest --doctest-modules.
doctest_test_doctest_blocks = ""
doctest_global_setup = """
import numpy as np
"""

# -- MyST (the prose pages are Markdown) --------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# -- HTML ----------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"sphdist {release}"
html_theme_options = {
    "navbar_align": "left",
    # every page of the top-level toctree in the header (the theme's default of 5 put the
    # command-line reference and development under "More")
    "header_links_before_dropdown": 7,
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
# the pages without sub-pages need no section navigation
html_sidebars = {
    page: [] for page in
    ("index", "getting-started", "methods", "reproducing", "cli", "development")
}
html_static_path: list[str] = []
html_show_sourcelink = False


# -- the `repo` role: a file of the repository, outside docs/ ----------------------------------
def _repo_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{repo}`pipelines/results/benchmark.md``: a download link to that repository file.

    The file is copied into the built site (``_downloads/``), so the link works offline; a
    missing file is a warning (an error under -W), so links cannot rot silently.
    """
    from docutils import nodes
    from sphinx import addnodes

    match = re.fullmatch(r"(?s)(.*?)\s*<(.+)>", text)
    title, target = (match.group(1), match.group(2)) if match else (text, text)
    path = ROOT / target
    if not path.is_file():
        message = inliner.reporter.warning(
            f"{target}: no such file in the repository", line=lineno
        )
        return [nodes.literal(rawtext, title)], [message]
    env = inliner.document.settings.env
    reference = addnodes.download_reference(
        rawtext, "", refdoc=env.docname, refdomain="", reftype="download",
        refexplicit=True, reftarget="/" + str(Path("..") / target),
    )
    reference += nodes.literal(title, title)
    return [reference], []


def _origin(node) -> str | None:
    """The module whose docstring holds ``node`` (from its source, ``docstring of a.b.c``)."""
    match = re.search(r"docstring of ([\w.]+)", str(node.source or ""))
    if not match:
        return None
    parts = match.group(1).split(".")
    while parts:
        try:
            importlib.import_module(".".join(parts))
        except ImportError:
            parts.pop()
        else:
            return ".".join(parts)
    return None


def _lookup(module: str, parts: list[str]) -> object | None:
    """``module.parts[0].parts[1]...``, or None where there is no such attribute."""
    obj: object = importlib.import_module(module)
    for part in parts:
        try:
            obj = getattr(obj, part)
        except Exception:  # noqa: BLE001 (any failure means: not there)
            return None
    return obj


def _private(obj: object) -> bool:
    """True for an object of sphdist that lives in a private module or has a private name."""
    module = getattr(obj, "__module__", "") or ""
    name = getattr(obj, "__qualname__", "") or ""
    return module.startswith("sphdist") and any(
        part.startswith("_") for part in [*module.split("."), *name.split(".")]
    )


def _resolve_relative(app, env, node, contnode):
    """Resolve the Python references that name an object as its module's code does.

    - ``sphdist.methods.<module>.<Estimator>``: the estimators are documented once, as
      ``sphdist.<Estimator>``.
    - A name as the referring module imports it (``kernels.pass_block`` in
      :mod:`sphdist.core.solver`, ``sun_gamma`` in an estimator documented as
      ``sphdist.X``): the documented object whose full name ends with it (within the current
      module when several do).
    - A learned attribute or field of a documented class (``SphericalPCA.n_iter_``): the
      class, whose Attributes section describes it.
    - A private helper that exists (``unit_rows`` of :mod:`sphdist.methods._base`): shown as
      code, without a link, as it is not part of the reference.

    Anything else stays a broken reference: an error under -W.
    """
    if node.get("refdomain") != "py":
        return None
    domain = env.get_domain("py")
    target = node.get("reftarget", "")
    parts = target.split(".")
    if target.startswith("sphdist.methods."):
        for i, part in enumerate(parts):
            if part in sphdist._ESTIMATORS:
                target, parts = ".".join(["sphdist", *parts[i:]]), ["sphdist", *parts[i:]]
                break

    def resolve(name, reftype=node["reftype"]):
        return domain.resolve_xref(
            env, node["refdoc"], app.builder, reftype, name, node, contnode
        )

    matches = sorted({name for name in domain.objects
                      if name == target or name.endswith("." + target)})
    here = node.get("py:module") or ""
    origin = _origin(node)
    if len(matches) > 1:
        matches = [name for name in matches if name.startswith(here + ".")] or matches
    if len(matches) > 1 and origin:  # the one the referring module imports
        named = _lookup(origin, parts)
        matches = [name for name in matches
                   if named is not None and _lookup(name.split(".")[0], name.split(".")[1:])
                   is named] or matches
    if len(matches) == 1:
        return resolve(matches[0])
    if not matches and len(parts) > 1:
        owner = ".".join(parts[:-1])
        owners = [name for name in domain.objects
                  if (name == owner or name.endswith("." + owner))
                  and domain.objects[name].objtype in ("class", "exception")]
        if len(owners) == 1:
            return resolve(owners[0], "class")
    if matches:
        return None
    # a summary line of an autosummary table has no docstring as its source: look in the
    # modules that define the names of the page's module
    origins = [origin] if origin else _defining_modules(here)
    found = {id(obj): obj for obj in (_lookup(module, parts) for module in origins)
             if obj is not None}
    if len(found) == 1 and _private(next(iter(found.values()))):
        return contnode
    return None


def _defining_modules(modname: str) -> list[str]:
    """``modname`` and the modules that define its public names (none for no module)."""
    if not modname:  # a reference outside any module's page (a guide's text)
        return []
    try:
        module = importlib.import_module(modname)
    except ImportError:
        return []
    names = getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")])
    defining = {getattr(getattr(module, n, None), "__module__", None) for n in names}
    return [modname, *sorted(m for m in defining if m and m.startswith("sphdist"))]


# -- sphinx-click: the help texts are plain text, as --help prints them -------------------------
_RST_INLINE = re.compile(r"([|*\\]|(?<=\w)_(?!\w))")  # |x| *x* \ and word_ (a reference)
_LITERAL = re.compile(r"(`[^`]+`)")


def _plain_help(app, ctx, lines: list[str]) -> None:
    """Escape reST markup characters in the help texts sphinx-click renders.

    click's help is plain text (``|f_{k-1} - f_k|``, ``2**52``); sphinx-click parses it as
    reStructuredText, where ``|x|`` is a substitution. The directive lines sphinx-click writes
    (``.. option::``, ``:default:``, line blocks) are kept; `single backticks` stay literals.
    """
    for i, line in enumerate(lines):
        body = line.lstrip()
        indent = line[: len(line) - len(body)]
        if body.startswith((".. ", ":default:", ":options:")):
            continue
        prefix = ""
        if body.startswith("| "):  # a line block of a \b paragraph
            prefix, body = "| ", body[2:]
        pieces = _LITERAL.split(body)  # odd pieces are `literals`: left as they are
        body = "".join(p if k % 2 else _RST_INLINE.sub(r"\\\1", p) for k, p in enumerate(pieces))
        lines[i] = indent + prefix + body


def setup(app):  # noqa: D103 (Sphinx's extension entry point)
    for event in ("description", "options", "arguments", "epilog"):
        app.connect(f"sphinx-click-process-{event}", _plain_help)
    app.add_role("repo", _repo_role)
    app.connect("missing-reference", _resolve_relative)
