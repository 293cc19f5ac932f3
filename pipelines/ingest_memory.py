r"""Peak memory of ``sphdist ingest`` on document trees, beside scikit-learn's (issue 43).

Three kinds of folder trees (one file per document, labelled by its folder), each ingested by
the CLI as a user runs it (``sphdist ingest TREE -o OUT --on-error skip``, default options:
learned vocabulary, ``min_df=5``, ``max_df=0.5``, English stop words, sublinear tf) in a
fresh process, and by scikit-learn in another (``TfidfVectorizer`` with the same options,
``fit_transform`` of the list of the same texts: read, ``.gz`` decompressed, binary and
oversized files left out, latin-1 decoded, as the ingest reads them):

- **large**: files of about ``--large-mb`` MB of synthetic text (``sphdist.text.synth``'s
  model: Zipf law over ``--large-vocab`` pseudo-words, 4 topics), each with one token of 1,000
  characters (as a real tree has: an SVG path, a hex dump), ``--large-files`` files and 4
  times as many;
- **small**: ``--small-docs`` documents of ``--small-length`` tokens on average (20 topics,
  50,000 pseudo-words) and 4 times as many;
- **real**: a real tree (``--real``, default ``/usr/share/doc``; the issue's reproduction),
  copied first (``cp -a``) so both programs read the same files.

Every job is watched by :func:`_bench_monitor.run_monitored`: the peak resident set size is
the larger of the kernel's peak of the job's process (``VmHWM``, exact) and the summed RSS of
its process tree, polled every 0.1 s. Not ``wait4``'s ``ru_maxrss``: Linux keeps it across
``exec``, so a child reports at least the RSS of the benchmark when it forked. ``uptime`` is
recorded before each job. With ``--baseline DIR`` (a checkout of another sphdist, e.g.
``git worktree add /tmp/old HEAD~3``), its ingest is measured too on the trees of the first
size and the real tree.

Writes ``ingest_memory.md`` and ``ingest_memory.json`` under ``--output-dir``.

Usage::

    .venv/bin/python pipelines/ingest_memory.py                 # the default sizes
    .venv/bin/python pipelines/ingest_memory.py --large-files 4 --small-docs 2000 --real ''
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_monitor import error_of, run_monitored  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GIB = 2**30
#: scikit-learn's options equal to the ingest's defaults (sphdist.text.defaults.INGEST_DEFAULTS)
SKLEARN_OPTIONS = {"stop_words": "english", "sublinear_tf": True, "min_df": 5, "max_df": 0.5}
MAX_DOCUMENT_BYTES = 10_000_000  # the ingest's default --max-doc-bytes


# -- the trees ----------------------------------------------------------------------------------
def _write_synthetic(root: Path, n_docs: int, *, n_topics: int, doc_length: int,
                     vocab_size: int, long_token: bool, seed: int) -> None:
    from sphdist.text.synth import iter_documents

    for doc_id, label, text in iter_documents(n_docs, n_topics, seed=seed,
                                              doc_length=doc_length, vocab_size=vocab_size):
        if long_token:  # one 1,000-character token of its own (hex digits)
            token = hashlib.sha256(doc_id.encode()).hexdigest() * 16
            text = f"{text} {token[:1000]}"
        folder = root / label
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{doc_id}.txt").write_text(text, encoding="ascii")


def _texts(root: str) -> list[str]:
    """The texts the ingest reads from a tree, in its order (what scikit-learn is given)."""
    real_root = os.path.realpath(root)
    ids = []
    for dirpath, _, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        ids += [(rel / name).as_posix() for name in filenames if rel.parts]
    texts = []
    for doc_id in sorted(ids):
        path = os.path.join(root, doc_id)
        real = os.path.realpath(path)
        if not real.startswith(real_root + os.sep) or not os.path.isfile(real):
            continue
        if os.path.getsize(path) > MAX_DOCUMENT_BYTES:
            continue
        with open(path, "rb") as f:
            content = f.read()
        if doc_id.endswith(".gz"):
            try:
                with gzip.GzipFile(fileobj=io.BytesIO(content)) as g:
                    content = g.read(MAX_DOCUMENT_BYTES + 1)
            except (OSError, EOFError):
                continue
            if len(content) > MAX_DOCUMENT_BYTES:
                continue
        if b"\x00" in content:
            continue
        texts.append(content.decode("latin-1"))
    return texts


def _sklearn_child(root: str) -> None:
    from sklearn.feature_extraction.text import TfidfVectorizer

    start = time.perf_counter()
    texts = _texts(root)
    chars = sum(len(t) for t in texts)
    X = TfidfVectorizer(**SKLEARN_OPTIONS).fit_transform(texts)
    print(json.dumps({"seconds": time.perf_counter() - start, "n_documents": X.shape[0],
                      "n_features": X.shape[1], "nnz": int(X.nnz), "characters": chars}))


# -- the jobs -----------------------------------------------------------------------------------
def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True,
                              check=False).stdout.strip()
    except OSError:
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _job(cmd: list[str], env: dict[str, str], limit_gib: float) -> dict:
    uptime = _uptime()
    result = run_monitored(cmd, timeout=3600, mem_limit_gib=limit_gib, env=env, cwd=REPO,
                           interval=0.1)
    peak = max(result["driver_peak_rss_gib"] or 0.0, result["simultaneous_peak_rss_gib"])
    entry = {"uptime": uptime, "peak_rss_gib": round(peak, 4),
             "wall_s": round(result["wall_s"], 1), "error": error_of(result),
             "stopped": result["stopped"]}
    if entry["error"] is None and result["returncode"] == 0 and result["stdout"]:
        try:
            entry.update(json.loads(result["stdout"][-1]))
        except json.JSONDecodeError:
            entry["summary"] = result["stdout"][-1]
    return entry


def _sphdist_cmd() -> list[str]:
    script = Path(sys.executable).with_name("sphdist")
    return [str(script)] if script.exists() else [
        sys.executable, "-c", "import sys; from sphdist.cli import main; sys.exit(main())"]


def _measure(tree: Path, work: Path, limit_gib: float, baseline: Path | None) -> dict:
    out: dict = {}
    for name, pythonpath in (("sphdist", REPO), ("baseline", baseline)):
        if pythonpath is None:
            continue
        env = {**os.environ, "PYTHONPATH": str(pythonpath)}
        corpus = work / f"{tree.name}-{name}.zarr"
        out[name] = _job([*_sphdist_cmd(), "ingest", str(tree), "-o", str(corpus),
                          "--on-error", "skip", "--overwrite", "--json"], env, limit_gib)
        shutil.rmtree(corpus, ignore_errors=True)
    out["sklearn"] = _job([sys.executable, __file__, "sklearn-child", str(tree)],
                          {**os.environ, "PYTHONPATH": str(REPO)}, limit_gib)
    return out


# -- the report ---------------------------------------------------------------------------------
def _gb(entry: dict | None) -> str:
    if not entry:
        return "-"
    if entry.get("error") and not entry.get("stopped"):
        return "failed"
    if entry.get("stopped"):
        return f"> {entry['peak_rss_gib']:.2f} (stopped)"
    return f"{entry['peak_rss_gib']:.2f}"


def _load(entry: dict) -> str:
    text = entry.get("uptime", "")
    return text.split("load average:")[-1].strip() if "load average" in text else text


def _report(results: dict, args: dict) -> str:
    rows = [
        "| tree | documents | MB of text | features (sphdist / scikit-learn) | sphdist peak GiB | "
        "scikit-learn peak GiB | ratio | baseline peak GiB | sphdist s | scikit-learn s | "
        "load (1, 5, 15 min) before sphdist |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in results["trees"].items():
        s, k = r["sphdist"], r["sklearn"]
        ok = s.get("error") is None and k.get("error") is None
        ratio = f"{s['peak_rss_gib'] / k['peak_rss_gib']:.2f}" if ok else "-"
        chars = k.get("characters")
        mb = f"{chars / 1e6:.0f}" if isinstance(chars, int) else "-"
        rows.append(
            f"| {name} | {s.get('n_documents', '-')} | {mb} | {s.get('n_features', '-')} / "
            f"{k.get('n_features', '-')} | {_gb(s)} | {_gb(k)} | {ratio} | "
            f"{_gb(r.get('baseline'))} | {s['wall_s']} | {k['wall_s']} | {_load(s)} |"
        )
    flat = []
    for kind in ("large", "small"):
        one, four = results["trees"].get(f"{kind}-1x"), results["trees"].get(f"{kind}-4x")
        if one and four:
            for who in ("sphdist", "sklearn"):
                if one[who].get("error") or four[who].get("error"):
                    continue
                a, b = one[who]["peak_rss_gib"], four[who]["peak_rss_gib"]
                flat.append(f"| {kind} | {who} | {a:.2f} | {b:.2f} | {b / a:.2f} |")
    lines = [
        "# Ingest peak memory on document trees (issue 43)",
        "",
        f"`pipelines/ingest_memory.py {args['command']}` on {platform.node()} "
        f"({os.cpu_count()} cores), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"sphdist at `{results['commit']}`.",
        "",
        "Peak resident set size of `sphdist ingest TREE -o OUT --on-error skip` (default "
        "options) and of scikit-learn's `TfidfVectorizer(stop_words='english', "
        "sublinear_tf=True, min_df=5, max_df=0.5).fit_transform` on the list of the same "
        "texts, each in a fresh process; the machine is shared: its load is recorded before "
        "each job (the whole `uptime` lines are in the JSON).",
        "",
        *rows,
        "",
        "Peak at 4 times the documents, over the peak at 1 time:",
        "",
        "| trees | program | 1x GiB | 4x GiB | ratio |",
        "|---|---|---:|---:|---:|",
        *flat,
        "",
        "Trees: " + "; ".join(f"**{k}** {v}" for k, v in results["descriptions"].items()) + ".",
        "",
    ]
    return "\n".join(lines)


@click.group(invoke_without_command=True)
@click.option("--large-files", type=click.IntRange(min=1), default=12, show_default=True,
              help="Files of the large tree at 1x (4x: four times as many).")
@click.option("--large-mb", type=click.FloatRange(min=0.01), default=2.0, show_default=True,
              help="Approximate size of one large file, MB.")
@click.option("--large-vocab", type=click.IntRange(min=10), default=200_000,
              show_default=True, help="Pseudo-words of the large files' model.")
@click.option("--small-docs", type=click.IntRange(min=10), default=20_000, show_default=True,
              help="Documents of the small tree at 1x.")
@click.option("--small-length", type=click.IntRange(min=1), default=200, show_default=True,
              help="Mean tokens of a small document.")
@click.option("--real", default="/usr/share/doc", show_default=True,
              help="A real folder tree to measure too ('' for none; skipped if missing).")
@click.option("--baseline", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Root of another sphdist checkout whose ingest is measured too (1x, real).")
@click.option("--limit-gib", type=float, default=6.0, show_default=True,
              help="A job whose processes hold more is stopped (reported as such).")
@click.option("--workdir", type=click.Path(path_type=Path),
              help="Scratch folder for the trees and corpora (default: a temporary one, "
                   "removed at the end).")
@click.option("--output-dir", type=click.Path(path_type=Path),
              default=REPO / "pipelines" / "results", show_default=True)
@click.pass_context
def main(ctx, large_files, large_mb, large_vocab, small_docs, small_length, real, baseline,
         limit_gib, workdir, output_dir):
    """Measure, then write ingest_memory.md and ingest_memory.json."""
    if ctx.invoked_subcommand is not None:
        return
    sys.path.insert(0, str(REPO))
    command = " ".join(a if " " not in a else repr(a) for a in sys.argv[1:])
    work = Path(tempfile.mkdtemp(prefix="ingest-memory-", dir=workdir))
    commit = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                            capture_output=True, text=True, check=False).stdout.strip()
    large_length = int(large_mb * 1e6 / 7)  # tokens: ~6 letters and a space each
    trees: dict[str, dict] = {}
    descriptions = {
        "large": f"files of ~{large_mb:g} MB ({large_length:,} tokens on average over "
                 f"{large_vocab:,} pseudo-words, 4 topics) each with one 1,000-character token",
        "small": f"documents of {small_length} tokens on average over 50,000 pseudo-words, "
                 "20 topics",
    }
    try:
        for kind, n1 in (("large", large_files), ("small", small_docs)):
            for scale in (1, 4):
                tree = work / f"{kind}-{scale}x"
                subprocess.run([sys.executable, __file__, "make-tree", kind, str(tree),
                                str(n1 * scale), str(large_length), str(large_vocab),
                                str(small_length)], check=True, cwd=REPO,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
                click.echo(f"{tree.name}: {n1 * scale} documents", err=True)
                trees[tree.name] = _measure(tree, work, limit_gib,
                                            baseline if scale == 1 else None)
                click.echo(json.dumps(trees[tree.name]), err=True)
                shutil.rmtree(tree)
        if real and Path(real).is_dir():
            tree = work / "real"
            subprocess.run(["cp", "-a", real, str(tree)], check=False)
            descriptions["real"] = f"a copy of {real}"
            trees[f"real ({real})"] = _measure(tree, work, limit_gib, baseline)
            click.echo(json.dumps(trees[f"real ({real})"]), err=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results = {"commit": commit, "trees": trees, "descriptions": descriptions}
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "ingest_memory.json").write_text(json.dumps(results, indent=1) + "\n")
    (output_dir / "ingest_memory.md").write_text(_report(results, {"command": command}))
    click.echo(f"wrote {output_dir / 'ingest_memory.md'}")


@main.command("make-tree", hidden=True)
@click.argument("kind", type=click.Choice(["large", "small"]))
@click.argument("root", type=click.Path(path_type=Path))
@click.argument("n_docs", type=int)
@click.argument("large_length", type=int)
@click.argument("large_vocab", type=int)
@click.argument("small_length", type=int)
def make_tree(kind, root, n_docs, large_length, large_vocab, small_length):
    if kind == "large":
        _write_synthetic(root, n_docs, n_topics=4, doc_length=large_length,
                         vocab_size=large_vocab, long_token=True, seed=1)
    else:
        _write_synthetic(root, n_docs, n_topics=20, doc_length=small_length,
                         vocab_size=50_000, long_token=False, seed=2)


@main.command("sklearn-child", hidden=True)
@click.argument("root")
def sklearn_child(root):
    _sklearn_child(root)


if __name__ == "__main__":
    main()
