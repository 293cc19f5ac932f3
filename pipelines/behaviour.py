r"""Behaviour recorder: run a fixed list of command lines and record what they print and write.

A restructuring that promises "behaviour unchanged, bitwise" (issue 26) is checked by recording
the same scenarios on the commit before and the commit after and comparing the two recordings.
Each scenario is one ``sphdist ...`` command line run as a subprocess (``sys.executable`` running
``sphdist.cli.main``, as the installed entry point does) in a fresh temporary directory per
group; the scenarios of a group run in order in one tree (a fit needs the corpus an earlier
scenario ingested). Preparation steps between them (writing source files, damaging a store: a
byte flipped in a chunk, a deleted array, an edited attribute) use only the standard library,
NumPy and zarr, never sphdist, so they do not change when sphdist's internals move.

Each record holds

- ``cmd``: the command line, the temporary directory written ``<TMP>``;
- ``exit``: the exit status;
- ``stdout`` / ``stderr``: normalised (:func:`normalise_text`): temporary paths, the data home,
  durations, rates, memory figures, timestamps, pids, the host name, ephemeral ports, random
  staging suffixes and uuids replaced by placeholders, progress bars dropped, a ``--debug``
  traceback's frames collapsed to one line; output that parses as JSON is normalised per key
  (:func:`normalise_json`: ``seconds``, ``since``, ``pid``, ... replaced, list lengths kept);
- ``outputs``: every entry of the temporary tree the command created, changed or removed; for a
  zarr store, each array's shape, dtype, the sha256 of its decoded values and its attributes
  (normalised JSON), and the attributes of each group; for another file, the sha256 of its bytes
  (of its decompressed bytes for ``.gz``; the normalised text of a ``.lock`` file).

Usage::

    SPHDIST_DATA_HOME=../shared/data python pipelines/behaviour.py --record before.json
    python pipelines/behaviour.py --compare before.json after.json   # exit 1 if any differ

``--jobs N`` runs N groups at once (default 2); ``--only GROUP`` records one group (debugging).
The results page is ``pipelines/results/behaviour.md``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import difflib
import gzip
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import numpy as np

REPO = Path(__file__).resolve().parents[1]

# The CLI as the entry point runs it: program name 'sphdist', exit status from click.
RUNNER = "import sys; sys.argv[0] = 'sphdist'; from sphdist.cli import main; sys.exit(main())"
RUN_TIMEOUT_S = 300

# ---------------------------------------------------------------------------------------------
# Normalisation
# ---------------------------------------------------------------------------------------------

HOSTNAMES = sorted({socket.gethostname(), socket.getfqdn()} - {"", "localhost"}, key=len,
                   reverse=True)

_TRACEBACK = re.compile(
    r"^Traceback \(most recent call last\):\n(?:(?:[ \t].*|)\n)*?(?=\S)", re.MULTILINE)
_ISO_TIME = re.compile(
    r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b")
_ETA = re.compile(r"\beta \S+")
_RATE = re.compile(
    r"\b\d+(?:[.,]\d+)*(?:e[+-]?\d+)? ?(?:[kKMGT]i?B|B|docs|documents|it|iterations|chunks)/s\b")
_MEM = re.compile(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+)? ?(?:[kKMGTP]i?B|bytes)\b")
_DURATION = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?(?:e[+-]?\d+)? ?(?:s|ms|us|µs|sec|secs|seconds?|min|minutes?)"
    r"(?![\w])")
_PID = re.compile(r"\b(pid|kill|process) \d+\b")
_PORT = re.compile(r"(?<=[\w\]>]):(?:3[2-9]\d{3}|[4-6]\d{4})\b")  # the ephemeral range
_STAGING = re.compile(r"\.tmp-[0-9a-f]{12}\b")
_VERSION = re.compile(r"\bv-[0-9a-f]{12}\b")  # an object-store layout's version prefix
_UUID = re.compile(r"\b[0-9a-f]{32}\b")
_PROGRESS_BAR = re.compile(r"\d+%\|")
_ADDRESS_IN_OBJECT = re.compile(r" at 0x[0-9a-f]+")
# A progress line "LABEL: N/M UNIT, <DUR>": how many of them a command prints before it fails
# depends on which task of the threaded scheduler fails first, so only the line of the
# completed step (N = M) is kept.
_PROGRESS_LINE = re.compile(r"^.*?: (\d+)/(\d+) [\w ]+, <DUR>$")


# Output of a library's own timing, not of sphdist: zarr's atexit handler joins its event loop
# thread with a 0.2 s timeout (zarr/core/sync.py, cleanup_resources), which a loaded machine
# misses now and then, and then says so; distributed's scheduler and workers log warnings of
# their own on a loaded machine ("Event loop was unresponsive", "full garbage collections").
LIBRARY_NOISE = (
    re.compile(r"^(?:<TIME>,\d+ - )?distributed\.[\w.]+ - (?:WARNING|INFO) - .*\n",
               re.MULTILINE),
    re.compile(r"^Thread did not finish cleanly; forcefully closing the event loop\.\n",
               re.MULTILINE),
    re.compile(r"^Exception ignored in atexit callback: <function cleanup_resources at <ADDR>>\n"
               r"Traceback \(most recent call last\): <FRAMES>\n"
               r"RuntimeError: Cannot close a running event loop\n", re.MULTILINE),
)


def normalise_text(text: str, replacements: dict[str, str] | None = None) -> str:
    r"""What of a command's output is the same on every run of the same code.

    Parameters
    ----------
    text : str
        stdout or stderr of one command.
    replacements : dict of str to str, optional
        Literal strings replaced first, longest first (the temporary directory by ``<TMP>``,
        the data home by ``<DATA>``).

    Returns
    -------
    str
        The text with volatile figures replaced by placeholders: a traceback's frames
        (``<FRAMES>``), ISO timestamps and clock times (``<TIME>``), ``eta ...`` (``eta <ETA>``),
        rates (``<RATE>``), memory figures (``<MEM>``), durations (``<DUR>``), pids (``pid
        <PID>``), the host name (``<HOST>``), ephemeral ports (``:<PORT>``), random staging
        suffixes (``.tmp-<ID>``), uuids (``<UUID>``) and object addresses (`` at <ADDR>``);
        progress bars (lines with ``NN%|`` or overwritten with ``\r``) and the progress lines
        of a step not complete (``LABEL: N/M UNIT, <DUR>`` with N < M) dropped, and the
        known teardown noise of libraries (:data:`LIBRARY_NOISE`) removed.

    Examples
    --------
    >>> normalise_text("wrote m.zarr: r=3, 4 iterations, objective 12.5, 0.05 s/iteration")
    'wrote m.zarr: r=3, 4 iterations, objective 12.5, <DUR>/iteration'
    """
    for old, new in sorted((replacements or {}).items(), key=lambda kv: -len(kv[0])):
        if old:
            text = text.replace(old, new)
    for name in HOSTNAMES:  # where a host is named: "pid 4242 on HOST", user@HOST, //HOST:port
        text = re.sub(rf"(?:(?<=\bon )|(?<=@)|(?<=//)){re.escape(name)}(?![\w.-])", "<HOST>",
                      text)
    lines = []
    for line in text.split("\n"):
        if "\r" in line:
            line = line.rstrip("\r").rsplit("\r", 1)[-1]
        if _PROGRESS_BAR.search(line):
            continue
        lines.append(line)
    text = "\n".join(lines)
    text = _TRACEBACK.sub("Traceback (most recent call last): <FRAMES>\n", text)
    text = _ISO_TIME.sub("<TIME>", text)
    text = _CLOCK.sub("<TIME>", text)
    text = _ETA.sub("eta <ETA>", text)
    text = _RATE.sub("<RATE>", text)
    text = _MEM.sub("<MEM>", text)
    text = _DURATION.sub("<DUR>", text)
    text = _PID.sub(r"\1 <PID>", text)
    text = _PORT.sub(":<PORT>", text)
    text = _STAGING.sub(".tmp-<ID>", text)
    text = _VERSION.sub("v-<ID>", text)
    text = _UUID.sub("<UUID>", text)
    text = _ADDRESS_IN_OBJECT.sub(" at <ADDR>", text)
    for noise in LIBRARY_NOISE:
        text = noise.sub("", text)
    lines = []
    for line in text.split("\n"):
        progress = _PROGRESS_LINE.match(line)
        if progress is None or progress[1] == progress[2]:
            lines.append(line)
    return "\n".join(lines)


# Keys whose values change from run to run of the same code (wall times, the writer's identity,
# a random id); their values are replaced, the shape of the value (list length) kept.
VOLATILE_KEYS = frozenset({
    "seconds", "seconds_per_iteration", "solver_seconds_per_iteration", "since", "pid", "host",
    "hostname",
    "elapsed", "wall_s", "started", "time", "timestamp", "token", "memory_budget",
    "memory_available",
})


def normalise_json(value: Any, replacements: dict[str, str] | None = None,
                   key: str | None = None) -> Any:
    """A JSON value with volatile fields replaced and every string normalised.

    Parameters
    ----------
    value : JSON value
        Parsed JSON (stdout of ``--json``, a store's attributes).
    replacements : dict of str to str, optional
        As in :func:`normalise_text`.
    key : str, optional
        The key ``value`` is stored under (volatile keys: :data:`VOLATILE_KEYS`).

    Returns
    -------
    JSON value
        ``value`` with each leaf under a volatile key replaced by ``"<VOLATILE>"`` (``None``
        kept, lists keep their length), every other string passed through
        :func:`normalise_text`, numbers kept as they are.

    Examples
    --------
    >>> normalise_json({"seconds": [0.1, 0.2], "n_iter": 2, "since": None})
    {'seconds': ['<VOLATILE>', '<VOLATILE>'], 'n_iter': 2, 'since': None}
    """
    if isinstance(value, dict):
        return {k: normalise_json(v, replacements, k) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise_json(v, replacements, key) for v in value]
    if key in VOLATILE_KEYS and value is not None:
        return "<VOLATILE>"
    if isinstance(value, str):
        return normalise_text(value, replacements)
    return value


def normalise_output(text: str, replacements: dict[str, str]) -> Any:
    """Stdout or stderr of a command: parsed and normalised when it is JSON, else as text."""
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return {"json": normalise_json(json.loads(stripped), replacements)}
        except ValueError:
            pass
    return normalise_text(text, replacements)


# ---------------------------------------------------------------------------------------------
# What a command wrote
# ---------------------------------------------------------------------------------------------


def _signature(path: Path) -> Any:
    """Changes when anything under ``path`` is created, removed, written or renamed."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    if path.is_symlink() or not path.is_dir():
        return ("f", st.st_size, st.st_mtime_ns)
    entries = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files) + dirs:
            p = Path(root, name)
            try:
                s = p.lstat()
            except FileNotFoundError:
                continue
            entries.append((str(p.relative_to(path)), s.st_size, s.st_mtime_ns))
    return ("d", tuple(entries))


def snapshot(tmp: Path) -> dict[str, Any]:
    """Signature of every top-level entry of the temporary tree."""
    return {p.name: _signature(p) for p in tmp.iterdir()}


def _sha256_of_values(values: np.ndarray, replacements: dict[str, str]) -> str:
    """sha256 of the values; strings after the literal replacements (ids can hold a path)."""
    h = hashlib.sha256()
    if values.dtype.kind in "OTUS":
        strings = [str(v) for v in values.ravel().tolist()]
        for old, new in sorted(replacements.items(), key=lambda kv: -len(kv[0])):
            if old and any(old in v for v in strings):
                strings = [v.replace(old, new) for v in strings]
        h.update(json.dumps(strings).encode())
    else:
        h.update(np.ascontiguousarray(values).tobytes())
    return h.hexdigest()


def _error(exc: BaseException, replacements: dict[str, str]) -> str:
    return normalise_text(f"{type(exc).__name__}: {exc}", replacements)


# Attributes holding a random value (a corpus' id, drawn when it is written, and the fingerprint
# beside it, which covers it): each distinct value is named by its order of appearance in the group
# (<corpus_id-1>, <fingerprint-2>, ...), its 12-character prefix (as messages print it) too, so
# that which model was fitted on which corpus is still compared.
RANDOM_IDS = ("corpus_id", "fingerprint")


def register_random_ids(value: Any, replacements: dict[str, str]) -> None:
    """Add the random ids found in attributes ``value`` to ``replacements``."""
    if isinstance(value, dict):
        for k, v in value.items():
            if (k in RANDOM_IDS and isinstance(v, str) and len(v) >= 24
                    and v not in replacements and "corpus_id" in value):
                n = sum(1 for label in replacements.values() if label.startswith(f"<{k}-")
                        and not label.endswith("..>"))
                replacements[v] = f"<{k}-{n + 1}>"
                replacements[v[:12]] = f"<{k}-{n + 1}..>"
            else:
                register_random_ids(v, replacements)
    elif isinstance(value, list):
        for v in value:
            register_random_ids(v, replacements)


def describe_zarr(path: Path, replacements: dict[str, str]) -> dict[str, Any]:
    """Every group's attributes and every array's shape, dtype, values digest and attributes."""
    import zarr

    out: dict[str, Any] = {}
    try:
        node = zarr.open(store=str(path), mode="r")
    except Exception as exc:  # a damaged or partial store is recorded as what it is
        return {"error": _error(exc, replacements)}

    def visit(node: Any, name: str) -> None:
        attrs = dict(node.attrs)
        register_random_ids(attrs, replacements)
        entry: dict[str, Any] = {"attrs": normalise_json(attrs, replacements)}
        if isinstance(node, zarr.Array):
            entry["shape"] = list(node.shape)
            entry["dtype"] = str(node.dtype)
            try:
                entry["sha256"] = _sha256_of_values(np.asarray(node[...]), replacements)
            except Exception as exc:
                entry["sha256"] = _error(exc, replacements)
            out[normalise_text(name, replacements)] = entry
            return
        out[normalise_text(name, replacements)] = entry
        try:
            members = sorted(node.members(), key=lambda kv: kv[0])
        except Exception as exc:
            entry["members"] = _error(exc, replacements)
            return
        for key, child in members:
            visit(child, f"{name}/{key}" if name else key)

    visit(node, "")
    return out


def describe(path: Path, replacements: dict[str, str]) -> Any:
    """What is at ``path`` now: a zarr store, a folder (recursively) or a file's digest."""
    if not path.exists() and not path.is_symlink():
        return "removed"
    if path.is_symlink():
        return {"symlink": normalise_text(os.readlink(path), replacements)}
    if path.is_dir():
        if (path / "zarr.json").exists() or (path / ".zgroup").exists():
            return {"zarr": describe_zarr(path, replacements)}
        return {"dir": {normalise_text(p.name, replacements): describe(p, replacements)
                        for p in sorted(path.iterdir())}}
    data = path.read_bytes()
    if path.suffix == ".lock":
        return {"lock": normalise_output(data.decode("utf-8", "replace"), replacements)}
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)  # the gzip header holds the time of writing
        except (OSError, EOFError):
            pass
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


# ---------------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    """One recorded command line; ``{tmp}`` in an argument or env value is the group's tree."""

    name: str
    args: list[str]
    env: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Prep:
    """A preparation step (not recorded): ``fn(tmp, state)``."""

    name: str
    fn: Callable[[Path, dict], None]


def run(name: str, *args: Any, env: dict[str, str] | None = None) -> Run:
    """A scenario; an output named ``x.EXT`` (meant to be refused) is renamed after it."""
    stem = re.sub(r"[^\w.-]+", "_", name)
    args = tuple(re.sub(r"^x\.(\w+)$", rf"{stem}.out.\1", str(a)) for a in args)
    return Run(name, list(args), dict(env or {}))


def prep(name: str, fn: Callable[[Path, dict], None]) -> Prep:
    return Prep(name, fn)


# -- preparation helpers: standard library, NumPy and zarr only ------------------------------

def _jsonl(path: Path, records: list[dict], *, bom: bool = False) -> None:
    text = "".join(json.dumps(r) + "\n" for r in records)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())


WORDS = ("space shuttle orbit launch nasa rocket moon engine car drive wheel brake motor "
         "road speed gun law rights police court vote health doctor disease patient drug "
         "graphics image color pixel screen render file format").split()


def _records(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    labels = ["space", "autos", "politics", "med", "graphics"]
    out = []
    for i in range(n):
        k = i % len(labels)
        topic = WORDS[k * 6:(k + 1) * 6] or WORDS[-6:]
        words = rng.choice(topic + WORDS, size=int(rng.integers(8, 20)))
        out.append({"id": f"d{i}", "label": labels[k], "text": " ".join(words)})
    return out


def make_sources(tmp: Path, state: dict) -> None:
    """Text sources of every format, small, and the bad ones of the reliability table."""
    recs = _records(60, 0)
    _jsonl(tmp / "small.jsonl", recs)
    _jsonl(tmp / "part1.jsonl", recs[:30])
    _jsonl(tmp / "part2.jsonl", [{**r, "id": f"e{i}"} for i, r in enumerate(recs[30:])])
    _jsonl(tmp / "bom.jsonl", recs[:20], bom=True)
    _jsonl(tmp / "tiny.jsonl", recs[:5])
    (tmp / "small.txt").write_bytes((tmp / "small.jsonl").read_bytes())
    (tmp / "empty.jsonl").write_bytes(b"")
    lines = (tmp / "small.jsonl").read_text().splitlines()
    (tmp / "badline.jsonl").write_text("\n".join(lines[:7] + ["{not json"] + lines[7:20]) + "\n")
    nested = '{"text": ' + "[" * 5000 + "]" * 5000 + "}"
    (tmp / "nested.jsonl").write_text("\n".join(lines[:12] + [nested] + lines[12:20]) + "\n")
    dup = [dict(r) for r in recs[:20]]
    dup[7]["id"] = dup[2]["id"]
    _jsonl(tmp / "dup.jsonl", dup)
    gz = gzip.compress((tmp / "small.jsonl").read_bytes(), mtime=0)
    (tmp / "trunc.jsonl.gz").write_bytes(gz[: len(gz) // 2])
    with open(tmp / "small.csv", "w", newline="") as f:
        f.write("id,label,text\n")
        for r in recs:
            f.write(f"{r['id']},{r['label']},\"{r['text']}\"\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({k: [r[k] for r in recs] for k in ("id", "label", "text")}),
                   tmp / "small.parquet")
    src = tmp / "src"
    for i, r in enumerate(recs):
        d = src / r["label"]
        d.mkdir(parents=True, exist_ok=True)
        header = f"From: user{i}@example.org\nSubject: note {i}\n\n"
        (d / f"{i:03d}.txt").write_text(header + r["text"] + "\n-- \nsig line\n")
    with tarfile.open(tmp / "src.tar.gz", "w:gz") as tar:
        for p in sorted(src.rglob("*")):
            info = tar.gettarinfo(str(p), arcname=str(p.relative_to(tmp)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if p.is_file():
                with open(p, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    bad = tmp / "badname"
    shutil.copytree(src, bad)
    with open(os.path.join(os.fsencode(bad / "space"), b"bad\xff\xfe.txt"), "wb") as f:
        f.write(b"space orbit launch\n")
    with tarfile.open(tmp / "link.tar", "w") as tar:
        for p in sorted((src / "space").iterdir())[:6]:
            info = tar.gettarinfo(str(p), arcname=f"src/space/{p.name}")
            info.mtime = 0
            with open(p, "rb") as f:
                tar.addfile(info, f)
        link = tarfile.TarInfo("src/space/link")
        link.type, link.linkname = tarfile.SYMTYPE, "../../../etc/passwd"
        tar.addfile(link)


def copy(src: str, dst: str) -> Callable[[Path, dict], None]:
    def fn(tmp: Path, state: dict) -> None:
        shutil.copytree(tmp / src, tmp / dst)
    return fn


def move(src: str, dst: str) -> Callable[[Path, dict], None]:
    def fn(tmp: Path, state: dict) -> None:
        (tmp / src).rename(tmp / dst)
    return fn


def _attrs_file(store: Path) -> Path:
    return store / "zarr.json"


def edit_attrs(store: str, edit: Callable[[dict], None], member: str = "") -> Callable:
    """Edit a group's (or a member's) attributes in its zarr.json, as a user's editor would."""
    def fn(tmp: Path, state: dict) -> None:
        path = _attrs_file(tmp / store / member)
        meta = json.loads(path.read_text())
        edit(meta.setdefault("attributes", {}))
        path.write_text(json.dumps(meta, indent=2))
    return fn


def edit_metadata(store: str, member: str, edit: Callable[[dict], None]) -> Callable:
    def fn(tmp: Path, state: dict) -> None:
        path = tmp / store / member / "zarr.json"
        meta = json.loads(path.read_text())
        edit(meta)
        path.write_text(json.dumps(meta, indent=2))
    return fn


def flip_byte(store: str, chunk: str) -> Callable:
    def fn(tmp: Path, state: dict) -> None:
        p = tmp / store / chunk
        raw = bytearray(p.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        p.write_bytes(bytes(raw))
    return fn


def truncate(store: str, chunk: str) -> Callable:
    def fn(tmp: Path, state: dict) -> None:
        p = tmp / store / chunk
        p.write_bytes(p.read_bytes()[:7])
    return fn


def delete(store: str, member: str) -> Callable:
    def fn(tmp: Path, state: dict) -> None:
        shutil.rmtree(tmp / store / member)
    return fn


def set_values(store: str, array: str, edit: Callable[[np.ndarray], None]) -> Callable:
    """Write new values into an array through zarr (its chunks re-encoded, digests untouched)."""
    def fn(tmp: Path, state: dict) -> None:
        import zarr

        a = zarr.open_array(store=str(tmp / store / array), mode="r+")
        values = a[...]
        edit(values)
        a[...] = values
    return fn


def _setitem(index: Any, value: Any) -> Callable[[np.ndarray], None]:
    def edit(a: np.ndarray) -> None:
        a[index] = value
    return edit


def write_dense(name: str, *, bad: float | None = None) -> Callable:
    def fn(tmp: Path, state: dict) -> None:
        import zarr

        X = np.abs(np.random.default_rng(4).standard_normal((60, 25)))
        if bad is not None:
            X[17, 4] = bad
        zarr.create_array(str(tmp / name), data=X, chunks=(20, 25))
    return fn


def write_group(name: str, *, zarr_format: int = 3, dense: bool = False) -> Callable:
    def fn(tmp: Path, state: dict) -> None:
        import zarr

        g = zarr.open_group(store=str(tmp / name), mode="w", zarr_format=zarr_format)
        g.attrs["something"] = 1
        if dense:
            X = np.abs(np.random.default_rng(5).standard_normal((30, 12)))
            g.create_array("X", data=X, chunks=(10, 12))
    return fn


def write_dir_and_file(tmp: Path, state: dict) -> None:
    (tmp / "folder").mkdir()
    (tmp / "folder" / "notes.txt").write_text("hello")
    (tmp / "plain.txt").write_text("hello")


def start_background_fit(out: str, corpus: str) -> Callable:
    """A fit that holds ``out``'s lock while the next scenarios run (stopped by stop_background)."""
    def fn(tmp: Path, state: dict) -> None:
        args = [sys.executable, "-c", RUNNER, "--quiet", "fit", "-i", corpus, "-o", out,
                "-r", "3", "--max-iter", "100000", "--tol", "0"]
        proc = subprocess.Popen(args, cwd=tmp, env=state["env"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        state["background"] = proc
        state["ignore"] = out  # what it writes while the next scenarios run is not theirs
        deadline = time.monotonic() + 120
        while not (tmp / out).exists():  # its first checkpoint is committed
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the background fit did not start")
            time.sleep(0.05)
    return fn


def stop_background(tmp: Path, state: dict) -> None:
    proc = state.pop("background")
    state.pop("ignore")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


# -- the scenarios -----------------------------------------------------------------------------

HELP = ["ingest", "synth", "fit", "transform", "export", "info", "neighbors", "evaluate",
        "plot", "plot convergence", "plot embedding"]

NG_GROUPS = "comp.graphics,rec.autos,sci.space,talk.politics.guns,sci.med"
SYNTH = ["synth", "--n-docs", "150", "--n-topics", "3", "--vocab-size", "300",
         "--doc-length", "40"]


def _help_group() -> list:
    steps: list = [run("help", "--help"), run("version", "--version"),
                   run("help-short", "-h")]
    steps += [run(f"help-{c.replace(' ', '-')}", *c.split(), "--help") for c in HELP]
    steps += [
        run("unknown-command", "fitt"),
        run("no-command"),
        run("fit-no-input", "fit"),
        run("transform-no-input", "transform", "-m", "m.zarr"),
        run("bad-log-level", "--log-level", "loud", "info", "x"),
        run("bad-storage-option", "--storage-option", "novalue", "info", "x"),
    ]
    return steps


def _synth_group() -> list:
    return [
        run("synth-jsonl", *SYNTH, "-o", "docs.jsonl"),
        run("synth-jsonl-gz", *SYNTH, "--seed", "1", "-o", "docs.jsonl.gz"),
        run("synth-corpus-hashing", *SYNTH, "--format", "corpus", "--n-features", "512",
            "--chunk-size", "32", "-o", "hc.zarr", "--json"),
        run("synth-corpus-vocabulary", *SYNTH, "--format", "corpus", "--vocabulary",
            "--chunk-size", "50", "-o", "vc.zarr"),
        run("synth-exists", *SYNTH, "-o", "docs.jsonl"),
        run("synth-overwrite", *SYNTH, "--seed", "2", "-o", "docs.jsonl", "--overwrite"),
        run("synth-quiet", "-q", *SYNTH, "-o", "q.jsonl"),
        run("synth-json", *SYNTH, "-o", "j.jsonl", "--json"),
        run("synth-file-url", *SYNTH, "-o", "file://{tmp}/url.jsonl"),
        run("synth-n-docs-0", "synth", "--n-docs", "0", "--n-topics", "2", "-o", "z.jsonl"),
        run("synth-n-topics-0", "synth", "--n-docs", "5", "--n-topics", "0", "-o", "z.jsonl"),
        run("synth-chunk-size-0", *SYNTH, "--chunk-size", "0", "-o", "z.jsonl"),
        run("synth-bad-format", *SYNTH, "--format", "xml", "-o", "z.xml"),
        run("synth-empty-output", *SYNTH, "-o", ""),
        run("synth-dot-output", *SYNTH, "-o", "."),
        run("synth-no-output", *SYNTH),
        run("fit-synth-vocabulary", "fit", "-i", "vc.zarr", "-o", "vm.zarr", "-r", "3",
            "--max-iter", "3"),
        run("info-top-terms", "info", "-m", "vm.zarr", "--top-terms", "3"),
        run("fit-synth-hashing", "fit", "-i", "hc.zarr", "-o", "hm.zarr", "-r", "3",
            "--max-iter", "3"),
        run("info-top-terms-hashed", "info", "-m", "hm.zarr", "--top-terms", "3"),
        run("evaluate-synth", "evaluate", "-m", "hm.zarr", "--n-init", "2"),
    ]


def _ingest_group() -> list:
    ing = ["ingest", "small.jsonl", "--label-field", "label", "--min-df", "2",
           "--chunk-size", "16"]
    return [
        prep("sources", make_sources),
        run("ingest-jsonl", *ing, "-o", "c.zarr"),
        run("ingest-jsonl-json", *ing, "-o", "cj.zarr", "--json"),
        run("ingest-exists", *ing, "-o", "c.zarr"),
        run("ingest-overwrite", *ing, "-o", "c.zarr", "--overwrite"),
        run("ingest-hashing", "ingest", "small.jsonl", "--label-field", "label", "--hashing",
            "--n-features", "1024", "--chunk-size", "16", "-o", "h.zarr"),
        run("ingest-hashing-min-df", *ing, "--hashing", "--n-features", "1024", "-o", "x.zarr"),
        run("ingest-max-features", *ing, "--max-features", "12", "-o", "mf.zarr"),
        run("ingest-select", *ing, "--select", "mutual-info", "--n-select", "10",
            "-o", "sel.zarr"),
        run("ingest-text-options", *ing, "--stop-words", "none", "--no-sublinear-tf",
            "--no-lowercase", "--strip-accents", "ascii", "--token-pattern", r"(?u)\b\w+\b",
            "-o", "opt.zarr"),
        run("ingest-max-df", *ing, "--max-df", "0.9", "-o", "mdf.zarr"),
        run("ingest-ids", *ing, "--id-field", "id", "-o", "ids.zarr"),
        run("ingest-min-df-abc", "ingest", "small.jsonl", "--min-df", "abc", "-o", "x.zarr"),
        run("ingest-token-pattern-bad", *ing, "--token-pattern", "(", "-o", "x.zarr"),
        run("ingest-token-pattern-groups", *ing, "--token-pattern", "(a)(b)", "-o", "x.zarr"),
        run("ingest-n-features-huge", *ing, "--hashing", "--n-features", "99999999999999",
            "-o", "x.zarr"),
        run("ingest-chunk-size-huge", *ing, "--chunk-size", "100000000000000000000",
            "-o", "x.zarr"),
        run("ingest-partition-size-huge", *ing, "--partition-size", "1e20", "-o", "x.zarr"),
        run("ingest-missing-source", "ingest", "nope.jsonl", "-o", "x.zarr"),
        run("ingest-no-output", "ingest", "small.jsonl"),
        run("ingest-empty-output", *ing, "-o", ""),
        run("ingest-dot-output", *ing, "-o", "."),
        run("ingest-csv", "ingest", "small.csv", "--label-field", "label", "--min-df", "2",
            "-o", "csv.zarr"),
        run("ingest-csv-missing-label", "ingest", "small.csv", "--label-field", "topic",
            "--min-df", "2", "-o", "x.zarr"),
        run("ingest-text-field-missing", "ingest", "small.jsonl", "--text-field", "body",
            "--min-df", "2", "-o", "x.zarr"),
        run("ingest-parquet", "ingest", "small.parquet", "--label-field", "label",
            "--min-df", "2", "-o", "pq.zarr"),
        run("ingest-folder", "ingest", "src", "--min-df", "2", "-o", "dir.zarr"),
        run("ingest-folder-categories", "ingest", "src", "--categories", "space,autos",
            "--min-df", "2", "-o", "cat.zarr"),
        run("ingest-folder-sample", "ingest", "src", "--max-docs-per-label", "5", "--seed",
            "1", "--min-df", "2", "-o", "sample.zarr"),
        run("ingest-folder-remove-headers", "ingest", "src", "--remove-headers", "--min-df",
            "2", "-o", "rh.zarr"),
        run("ingest-folder-unknown-category", "ingest", "src", "--categories", "nosuch",
            "--min-df", "2", "-o", "x.zarr"),
        run("ingest-tar", "ingest", "src.tar.gz", "--min-df", "2", "-o", "tar.zarr"),
        run("ingest-glob", "ingest", "part*.jsonl", "--min-df", "2", "-o", "glob.zarr"),
        run("ingest-bom", "ingest", "bom.jsonl", "--min-df", "1", "-o", "bom.zarr"),
        run("ingest-format-override", "ingest", "small.txt", "--format", "jsonl",
            "--min-df", "2", "-o", "fmt.zarr"),
        run("ingest-bad-line", "ingest", "badline.jsonl", "--min-df", "2", "-o", "x.zarr"),
        run("ingest-bad-line-skip", "ingest", "badline.jsonl", "--min-df", "2",
            "--on-error", "skip", "-o", "skip.zarr"),
        run("ingest-nested", "ingest", "nested.jsonl", "--min-df", "2", "-o", "x.zarr"),
        run("ingest-nested-skip", "ingest", "nested.jsonl", "--min-df", "2", "--on-error",
            "skip", "-o", "nested.zarr"),
        run("ingest-duplicate-ids", "ingest", "dup.jsonl", "--id-field", "id", "--min-df",
            "2", "-o", "x.zarr"),
        run("ingest-duplicate-ids-skip", "ingest", "dup.jsonl", "--id-field", "id",
            "--min-df", "2", "--on-error", "skip", "-o", "dup.zarr"),
        run("ingest-truncated-gz", "ingest", "trunc.jsonl.gz", "--min-df", "2",
            "-o", "x.zarr"),
        run("ingest-non-utf8-name", "ingest", "badname", "--min-df", "2", "-o", "x.zarr"),
        run("ingest-non-utf8-name-skip", "ingest", "badname", "--min-df", "2", "--on-error",
            "skip", "-o", "badname.zarr"),
        run("ingest-tar-symlink", "ingest", "link.tar", "--min-df", "1", "-o", "x.zarr"),
        run("ingest-tar-symlink-skip", "ingest", "link.tar", "--min-df", "1", "--on-error",
            "skip", "-o", "link.zarr"),
        run("ingest-empty-file", "ingest", "empty.jsonl", "-o", "x.zarr"),
        run("ingest-tiny-defaults", "ingest", "tiny.jsonl", "-o", "x.zarr"),
        run("ingest-tiny-min-df-1", "ingest", "tiny.jsonl", "--min-df", "1", "--max-df", "1.0",
            "-o", "tiny.zarr"),
        run("ingest-max-doc-bytes", "ingest", "small.jsonl", "--min-df", "2",
            "--max-doc-bytes", "20", "-o", "x.zarr"),
        run("ingest-file-url", "ingest", "file://{tmp}/small.jsonl", "--label-field", "label",
            "--min-df", "2", "--chunk-size", "16", "-o", "file://{tmp}/url.zarr"),
        run("ingest-two-workers", *ing, "--n-workers", "2", "--partition-size", "16",
            "-o", "w2.zarr"),
        run("ingest-quiet", "-q", *ing, "-o", "quiet.zarr"),
        run("ingest-like-corpus", "ingest", "part2.jsonl", "--like", "c.zarr",
            "-o", "like.zarr"),
        run("ingest-like-missing", "ingest", "part2.jsonl", "--like", "nope.zarr",
            "-o", "x.zarr"),
    ]


def _newsgroups_group() -> list:
    ng = ["ingest", "--categories", NG_GROUPS, "--max-docs-per-label", "30", "--chunk-size", "64"]
    return [
        run("ng-ingest", *ng, "-o", "ng.zarr"),
        run("ng-ingest-no-data-home", *ng, "-o", "x.zarr",
            env={"SPHDIST_DATA_HOME": "{tmp}/nope"}),
        run("ng-fit", "fit", "-i", "ng.zarr", "-o", "ng.model.zarr", "-r", "5",
            "--max-iter", "8"),
        run("ng-info-top-terms", "info", "-m", "ng.model.zarr", "--top-terms", "5"),
        run("ng-evaluate", "evaluate", "-m", "ng.model.zarr", "--n-init", "3"),
        run("ng-neighbors-query", "neighbors", "-m", "ng.model.zarr", "-q",
            "space shuttle launch orbit", "-k", "5"),
        run("ng-export", "export", "-m", "ng.model.zarr", "-o", "ng.parquet"),
    ]


def _fit_group() -> list:
    fit = ["fit", "-i", "c.zarr", "-r", "3"]
    steps: list = [
        run("synth", *SYNTH, "-o", "docs.jsonl"),
        run("synth-other", *SYNTH, "--seed", "9", "-o", "other.jsonl"),
        run("ingest", "ingest", "docs.jsonl", "--label-field", "label", "--chunk-size", "40",
            "-o", "c.zarr"),
        run("ingest-other", "ingest", "other.jsonl", "--label-field", "label",
            "--chunk-size", "40", "-o", "c2.zarr"),
        run("fit", *fit, "-o", "m.zarr", "--max-iter", "4"),
        run("fit-json", *fit, "-o", "mj.zarr", "--max-iter", "3", "--json"),
        run("fit-default-output", *fit, "--max-iter", "2"),
        run("fit-exists-same", *fit, "-o", "m.zarr", "--max-iter", "4"),
        run("fit-exists-other", "fit", "-i", "c.zarr", "-r", "4", "-o", "m.zarr"),
        run("fit-resume-n-components", *fit[:-1], "2", "-o", "m.zarr", "--max-iter", "6",
            "--resume"),
        run("fit-resume-seed", *fit, "--seed", "7", "-o", "m.zarr", "--max-iter", "6",
            "--resume"),
        run("fit-resume-lam", *fit, "--lam", "3", "-o", "m.zarr", "--max-iter", "6", "--resume"),
        run("fit-resume-other-corpus", "fit", "-i", "c2.zarr", "-r", "3", "-o", "m.zarr",
            "--max-iter", "6", "--resume"),
        run("fit-resume", *fit, "-o", "m.zarr", "--max-iter", "6", "--resume"),
        run("fit-resume-missing", *fit, "-o", "none.zarr", "--max-iter", "6", "--resume"),
        run("fit-overwrite", *fit, "-o", "mj.zarr", "--max-iter", "2", "--seed", "3",
            "--overwrite"),
    ]
    variants = {
        "init-svd": ["--init", "svd", "--n-power-iter", "2"],
        "lam-mu-palm": ["--lam", "palm", "--mu", "palm"],
        "lam-mu-theory": ["--lam", "theory", "--mu", "theory"],
        "lam-mu-numbers": ["--lam", "3.5", "--mu", "0"],
        "float32": ["--dtype", "float32"],
        "polar-svd": ["--polar", "svd"],
        "polar-gram": ["--polar", "gram"],
        "partials-dense": ["--partials", "dense"],
        "partials-rows": ["--partials", "rows"],
        "no-accelerate": ["--no-accelerate"],
        "checkpoint-every": ["--checkpoint-every", "2"],
        "streamed": ["--memory-budget", "0"],
        "memory-budget": ["--memory-budget", "1GiB"],
        "split-every": ["--split-every", "2"],
        "tol": ["--tol", "0.05", "--max-iter", "50"],
        "max-iter-0": ["--max-iter", "0"],
        "init-from": ["--init-from", "m.zarr"],
        "quiet": ["-q"],
        "log-level-warning": ["--log-level", "warning"],
    }
    for name, extra in variants.items():
        more = ["--max-iter", "4"] if "--max-iter" not in extra else []
        if extra[0].startswith("-") and extra[0] in ("-q", "--log-level"):
            steps.append(run(f"fit-{name}", *extra, *fit, "-o", f"{name}.zarr", *more))
        else:
            steps.append(run(f"fit-{name}", *fit, *extra, "-o", f"{name}.zarr", *more))
    usage = [("-r", "0"), ("-r", "-3"), ("-r", "two"), ("--max-iter", "-1"), ("--tol", "-0.1"),
             ("--tol", "x"), ("--seed", "-5"), ("--lam", "fast"), ("--lam", "1"),
             ("--mu", "-1"), ("--checkpoint-every", "0"), ("--n-workers", "-1"),
             ("--retries", "-1"), ("--lam", "1e160"), ("--mu", "1e200"), ("--dtype", "int8"),
             ("--polar", "qr"), ("--split-every", "1"), ("--memory-budget", "lots"),
             ("--memory-limit", "4XB"), ("--dashboard-address", "127.0.0.1:notaport"),
             ("--scheduler-address", "foo://bar"),
             ("--scheduler-address", "tcp://127.0.0.1:notaport")]
    for option, value in usage:
        steps.append(run(f"fit-bad{option}={value}", "fit", "-i", "c.zarr", "-o", "x.zarr",
                         option, value))
    steps += [
        run("fit-scheduler-env", "fit", "-i", "c.zarr", "-o", "x.zarr",
            env={"DASK_SCHEDULER_ADDRESS": "foo://bar"}),
        run("fit-too-many-components", "fit", "-i", "c.zarr", "-o", "x.zarr", "-r", "1000"),
        run("fit-init-from-other-r", "fit", "-i", "c.zarr", "-o", "x.zarr", "-r", "2",
            "--init-from", "m.zarr"),
        run("fit-init-from-missing", *fit, "-o", "x.zarr", "--init-from", "nope.zarr"),
        run("fit-missing-input", *fit[:1], "-i", "nope.zarr", "-o", "x.zarr"),
        run("fit-missing-input-debug", "--debug", "fit", "-i", "nope.zarr", "-o", "x.zarr"),
        prep("not-corpora", write_dir_and_file),
        prep("zarr-group", write_group("group.zarr")),
        prep("zarr-group-dense", write_group("group-dense.zarr", dense=True)),
        prep("zarr-v2-group", write_group("v2.zarr", zarr_format=2, dense=True)),
        run("fit-folder-input", *fit, "-i", "folder", "-o", "x.zarr"),
        run("fit-file-input", *fit, "-i", "plain.txt", "-o", "x.zarr"),
        run("fit-group-input", *fit, "-i", "group.zarr", "-o", "x.zarr"),
        run("fit-group-dense-input", *fit, "-i", "group-dense.zarr", "-o", "gdm.zarr"),
        run("fit-v2-input", *fit, "-i", "v2.zarr", "-o", "x.zarr"),
        run("fit-empty-output", *fit, "-o", ""),
        run("fit-dot-output", *fit, "-o", "."),
        run("fit-corpus-as-output", *fit, "-o", "c2.zarr"),
        run("fit-corpus-as-output-overwrite", *fit, "-o", "c2.zarr", "--overwrite"),
        prep("dense", write_dense("dense.zarr")),
        prep("dense-nan", write_dense("dense-nan.zarr", bad=float("nan"))),
        prep("dense-huge", write_dense("dense-huge.zarr", bad=1e300)),
        run("fit-dense", "fit", "-i", "dense.zarr", "-o", "dm.zarr", "-r", "3",
            "--max-iter", "4"),
        run("fit-dense-nan", "fit", "-i", "dense-nan.zarr", "-o", "x.zarr", "-r", "3"),
        run("fit-dense-huge", "fit", "-i", "dense-huge.zarr", "-o", "x.zarr", "-r", "3"),
        run("info-dense-model", "info", "dm.zarr"),
        run("fit-file-url", "fit", "-i", "file://{tmp}/c.zarr", "-o", "file://{tmp}/um.zarr",
            "-r", "3", "--max-iter", "3"),
        run("fit-local-cluster", "fit", "-i", "c.zarr", "-o", "lc.zarr", "-r", "3",
            "--max-iter", "3", "--n-workers", "1", "--insecure-local-cluster"),
        run("info-fitted", "info", "m.zarr"),
        run("info-fitted-json", "info", "m.zarr", "--json"),
    ]
    return steps


def _use_group() -> list:
    m = ["-m", "m.zarr"]
    steps: list = [
        run("synth", *SYNTH, "-o", "docs.jsonl"),
        run("synth-other", *SYNTH, "--seed", "5", "-o", "other.jsonl"),
        run("ingest", "ingest", "docs.jsonl", "--label-field", "label", "--chunk-size", "40",
            "-o", "c.zarr"),
        run("ingest-unlabelled", "ingest", "docs.jsonl", "--chunk-size", "40", "-o", "u.zarr"),
        run("fit", "fit", "-i", "c.zarr", "-o", "m.zarr", "-r", "3", "--max-iter", "5"),
        run("ingest-like", "ingest", "other.jsonl", "--label-field", "label", "--like",
            "m.zarr", "-o", "like.zarr"),
        run("ingest-other-space", "ingest", "other.jsonl", "--label-field", "label",
            "-o", "other.zarr"),
        run("ingest-hashed", "ingest", "docs.jsonl", "--label-field", "label", "--hashing",
            "--n-features", "256", "-o", "h1.zarr"),
        run("ingest-hashed-other", "ingest", "other.jsonl", "--label-field", "label",
            "--hashing", "--n-features", "256", "-o", "h2.zarr"),
        run("fit-hashed", "fit", "-i", "h1.zarr", "-o", "mh.zarr", "-r", "3", "--max-iter", "3"),
        # transform
        run("transform", "transform", *m, "-i", "c.zarr", "-o", "e.zarr"),
        run("transform-json", "transform", *m, "-i", "c.zarr", "-o", "ej.zarr", "--json"),
        run("transform-exists", "transform", *m, "-i", "c.zarr", "-o", "e.zarr"),
        run("transform-overwrite", "transform", *m, "-i", "c.zarr", "-o", "ej.zarr",
            "--overwrite"),
        run("transform-like", "transform", *m, "-i", "like.zarr", "-o", "le.zarr"),
        run("transform-other-space", "transform", *m, "-i", "other.zarr", "-o", "x.zarr"),
        run("transform-other-idf", "transform", "-m", "mh.zarr", "-i", "h2.zarr",
            "-o", "x.zarr"),
        run("transform-corpus-as-model", "transform", "-m", "c.zarr", "-i", "like.zarr",
            "-o", "x.zarr"),
        run("transform-swapped", "transform", "-m", "c.zarr", "-i", "m.zarr", "-o", "x.zarr"),
        run("transform-missing-model", "transform", "-m", "nope.zarr", "-i", "c.zarr",
            "-o", "x.zarr"),
        # export
        run("export-parquet", "export", *m, "-o", "m.parquet"),
        run("export-npy", "export", *m, "-f", "npy", "-o", "m.npy"),
        run("export-json", "export", *m, "-o", "mj.parquet", "--json"),
        run("export-embedding", "export", *m, "-i", "le.zarr", "-o", "le.parquet"),
        run("export-exists", "export", *m, "-o", "m.parquet"),
        run("export-overwrite", "export", *m, "-o", "m.parquet", "--overwrite"),
        run("export-same-space-corpus", "export", *m, "-i", "like.zarr", "-o", "x.parquet"),
        run("export-other-space-corpus", "export", *m, "-i", "other.zarr", "-o", "x.parquet"),
        run("export-swapped", "export", "-m", "c.zarr", "-i", "m.zarr", "-o", "x.parquet"),
        run("export-model-as-input", "export", *m, "-i", "m.zarr", "-o", "x.parquet"),
        run("export-bad-format", "export", *m, "-f", "xls", "-o", "x.xls"),
        run("export-empty-output", "export", *m, "-o", ""),
        # info
        run("info-corpus", "info", "c.zarr"),
        run("info-corpus-json", "info", "c.zarr", "--json"),
        run("info-model", "info", "m.zarr"),
        run("info-embedding", "info", "e.zarr"),
        run("info-embedding-json", "info", "e.zarr", "--json"),
        run("info-top-terms", "info", *m, "--top-terms", "3"),
        run("info-top-terms-json", "info", *m, "--top-terms", "2", "--json"),
        run("info-top-terms-hashed", "info", "-m", "mh.zarr", "--top-terms", "3"),
        run("info-missing", "info", "nope.zarr"),
        run("info-missing-model", "info", "-m", "nope.zarr"),
        run("info-missing-json", "info", "nope.zarr", "--json"),
        run("info-file-url", "info", "file://{tmp}/m.zarr"),
        run("info-missing-url", "info", "file://{tmp}/nope.zarr"),
        run("info-no-path", "info"),
        # neighbors
        run("neighbors-doc-id", "neighbors", *m, "--doc-id", "docs.jsonl:3", "-k", "4"),
        run("neighbors-include-self", "neighbors", *m, "--doc-id", "docs.jsonl:3", "-k", "4",
            "--include-self"),
        run("neighbors-query", "neighbors", *m, "-q", "snube drubi dre", "-k", "3"),
        run("neighbors-json", "neighbors", *m, "-q", "snube drubi dre", "-k", "3", "--json"),
        run("neighbors-embedding", "neighbors", *m, "-i", "le.zarr", "--doc-id",
            "other.jsonl:2", "-k", "3"),
        run("neighbors-k-0", "neighbors", *m, "-q", "snube", "-k", "0"),
        run("neighbors-nothing-asked", "neighbors", *m),
        run("neighbors-unknown-doc-id", "neighbors", *m, "--doc-id", "nosuch"),
        run("neighbors-swapped", "neighbors", "-m", "c.zarr", "-i", "m.zarr", "-q", "snube"),
        # evaluate
        run("evaluate", "evaluate", *m),
        run("evaluate-options", "evaluate", *m, "-k", "2", "--n-init", "2", "--seed", "3"),
        run("evaluate-json", "evaluate", *m, "--json"),
        run("evaluate-embedding", "evaluate", *m, "-i", "le.zarr", "--n-init", "2"),
        run("evaluate-held-out", "evaluate", *m, "-i", "like.zarr", "--n-init", "2"),
        run("evaluate-too-many-clusters", "evaluate", *m, "-k", "100000"),
        run("evaluate-huge-seed", "evaluate", *m, "--seed", str(10**27)),
        run("evaluate-swapped", "evaluate", "-m", "c.zarr", "-i", "m.zarr"),
        run("evaluate-model-as-input", "evaluate", *m, "-i", "m.zarr"),
        run("evaluate-unlabelled", "evaluate", *m, "-i", "u.zarr"),
        # plot
        run("plot-convergence", "plot", "convergence", *m),
        run("plot-convergence-json", "plot", "convergence", *m, "-o", "conv.png", "--json"),
        run("plot-embedding", "plot", "embedding", *m, "-o", "emb.png", "--max-points", "50"),
        run("plot-embedding-huge-seed", "plot", "embedding", *m, "--seed", str(10**27)),
        run("plot-embedding-swapped", "plot", "embedding", "-m", "c.zarr", "-i", "m.zarr"),
        # a corpus moved after the fit
        prep("moved", move("c.zarr", "moved.zarr")),
        run("export-moved-corpus", "export", *m, "-o", "x.parquet"),
        run("neighbors-moved-corpus", "neighbors", *m, "--doc-id", "docs.jsonl:3"),
        run("plot-embedding-moved-corpus", "plot", "embedding", *m, "-o", "x.png"),
        run("export-moved-corpus-input", "export", *m, "-i", "moved.zarr", "-o", "mv.parquet"),
        prep("moved-back", move("moved.zarr", "c.zarr")),
        # the checkpoint of a fit that stopped early
        prep("killed", copy("m.zarr", "killed.zarr")),
        prep("killed-attrs", edit_attrs("killed.zarr",
                                        lambda a: a["params"].__setitem__("max_iter", 200))),
        run("info-killed", "info", "killed.zarr"),
        run("transform-killed", "transform", "-m", "killed.zarr", "-i", "c.zarr",
            "-o", "ke.zarr"),
        run("evaluate-killed", "evaluate", "-m", "killed.zarr"),
        # a commit interrupted between its two renames
        prep("interrupted", copy("m.zarr", "mo.zarr.old")),
        run("info-interrupted", "info", "mo.zarr"),
        run("transform-interrupted", "transform", "-m", "mo.zarr", "-i", "c.zarr",
            "-o", "oe.zarr"),
        run("fit-resume-interrupted", "fit", "-i", "c.zarr", "-o", "mo.zarr", "-r", "3",
            "--max-iter", "5", "--resume"),
        # an embedding carrying a pickle codec
        prep("pickle", copy("e.zarr", "pe.zarr")),
        prep("pickle-codec", edit_metadata(
            "pe.zarr", "doc_ids",
            lambda meta: meta.__setitem__("codecs", [{"name": "numcodecs.pickle",
                                                      "configuration": {}}]))),
        run("info-pickle-embedding", "info", "pe.zarr"),
        run("export-pickle-embedding", "export", *m, "-i", "pe.zarr", "-o", "x.parquet"),
    ]
    return steps


def _damage_group() -> list:
    steps: list = [
        run("synth", *SYNTH, "-o", "docs.jsonl"),
        run("ingest", "ingest", "docs.jsonl", "--label-field", "label", "--chunk-size", "40",
            "-o", "c.zarr"),
        run("fit", "fit", "-i", "c.zarr", "-o", "m.zarr", "-r", "3", "--max-iter", "3"),
        # one chunk: a transform that fails has no other task still writing its staging
        # directory (with several chunks, a task still running after the failure can leave a
        # file there after the cleanup, now and then: not a recordable behaviour)
        run("ingest-one-chunk", "ingest", "docs.jsonl", "--label-field", "label", "--like",
            "m.zarr", "--chunk-size", "1000", "-o", "c1.zarr"),
    ]
    corpus_damage = {
        "byte-flipped": flip_byte("d.zarr", "X/00001/data/c/0"),
        "chunk-deleted": delete("d.zarr", "X/00001"),
        "idf-deleted": delete("d.zarr", "idf"),
        "chunk-truncated": truncate("d.zarr", "X/00001/data/c/0"),
        "wrong-nnz": set_values("d.zarr", "X/00001/indptr", lambda a: a.__setitem__(-1,
                                                                                    a[-1] + 2)),
        "index-out-of-range": set_values("d.zarr", "X/00001/indices", _setitem(0, 10**6)),
        "nan-value": set_values("d.zarr", "X/00001/data", _setitem(3, np.nan)),
        "huge-value": set_values("d.zarr", "X/00001/data", _setitem(3, 1e300)),
        "nan-idf": set_values("d.zarr", "idf", _setitem(5, np.nan)),
        "all-zero": set_values("d.zarr", "X/00000/data", _setitem(slice(None), 0.0)),
        "no-format-tag": edit_attrs("d.zarr", lambda a: a.pop("sphdist")),
        "no-format-version": edit_attrs("d.zarr", lambda a: a.__setitem__(
            "sphdist", {"kind": "corpus"})),
        "format-version-99": edit_attrs("d.zarr", lambda a: a.__setitem__(
            "sphdist", {"kind": "corpus", "format_version": 99})),
        "shape-10-12": edit_attrs("d.zarr", lambda a: a.__setitem__(
            "shape", [10**12, a["shape"][1]])),
        "kind-model": edit_attrs("d.zarr", lambda a: a["sphdist"].__setitem__("kind",
                                                                             "model")),
        "chunk-nnz": edit_attrs("d.zarr", lambda a: a["chunk_nnz"].__setitem__(
            1, a["chunk_nnz"][1] + 1)),
    }
    for name, damage in corpus_damage.items():
        steps += [
            prep(f"copy-{name}", copy("c.zarr", "d.zarr")),
            prep(name, damage),
            run(f"fit-corpus-{name}", "fit", "-i", "d.zarr", "-o", f"fit-{name}.zarr", "-r",
                "3", "--max-iter", "2"),
        ]
        if name in ("idf-deleted", "nan-idf", "shape-10-12", "no-format-tag", "byte-flipped"):
            steps.append(run(f"info-corpus-{name}", "info", "d.zarr"))
        steps.append(prep(f"remove-{name}", delete(".", "d.zarr")))
    transform_damage = {
        "byte-flipped": flip_byte("d1.zarr", "X/00000/data/c/0"),
        "chunk-deleted": delete("d1.zarr", "X/00000"),
        "nan-idf": set_values("d1.zarr", "idf", _setitem(5, np.nan)),
        "nan-value": set_values("d1.zarr", "X/00000/data", _setitem(3, np.nan)),
    }
    for name, damage in transform_damage.items():
        steps += [
            prep(f"copy-one-chunk-{name}", copy("c1.zarr", "d1.zarr")),
            prep(f"one-chunk-{name}", damage),
            run(f"transform-corpus-{name}", "transform", "-m", "m.zarr", "-i", "d1.zarr",
                "-o", f"transform-{name}.zarr"),
            prep(f"remove-one-chunk-{name}", delete(".", "d1.zarr")),
        ]
    model_damage = {
        "u-byte-flipped": flip_byte("dm.zarr", "U/c/0/0"),
        "v-deleted": delete("dm.zarr", "V"),
        "u-nan": set_values("dm.zarr", "U", _setitem((3, 1), np.nan)),
        "v-column-of-ones": set_values("dm.zarr", "V", _setitem((slice(None), 7), 1.0)),
        "n-components-attr": edit_attrs("dm.zarr", lambda a: a["params"].__setitem__(
            "n_components", 7)),
        "no-format-tag": edit_attrs("dm.zarr", lambda a: a.pop("sphdist")),
    }
    for name, damage in model_damage.items():
        steps += [
            prep(f"copy-model-{name}", copy("m.zarr", "dm.zarr")),
            prep(f"model-{name}", damage),
            run(f"info-model-{name}", "info", "dm.zarr"),
            run(f"transform-model-{name}", "transform", "-m", "dm.zarr", "-i", "c.zarr",
                "-o", f"transform-model-{name}.zarr"),
            run(f"export-model-{name}", "export", "-m", "dm.zarr", "-o", f"export-{name}.parquet"),
            prep(f"remove-model-{name}", delete(".", "dm.zarr")),
        ]
    steps += [
        # one writer per output: a second writer while a fit holds the lock
        prep("background-fit", start_background_fit("long.zarr", "c.zarr")),
        run("fit-overwrite-locked", "fit", "-i", "c.zarr", "-o", "long.zarr", "-r", "3",
            "--max-iter", "2", "--overwrite"),
        prep("stop-background-fit", stop_background),
    ]
    return steps


GROUPS: dict[str, Callable[[], list]] = {
    "help": _help_group,
    "synth": _synth_group,
    "ingest": _ingest_group,
    "newsgroups": _newsgroups_group,
    "fit": _fit_group,
    "use": _use_group,
    "damage": _damage_group,
}


# ---------------------------------------------------------------------------------------------
# Recording
# ---------------------------------------------------------------------------------------------


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DASK_", "SPHDIST_TLS_", "AWS_"))}
    env.update(COLUMNS="80", LINES="24", TERM="dumb", NO_COLOR="1", PYTHONHASHSEED="0",
               LC_ALL="C.UTF-8")
    return env


def _subst(text: str, tmp: Path) -> str:
    return text.replace("{tmp}", str(tmp))


# -- the fork server ---------------------------------------------------------------------------
#
# A fresh interpreter spends 1-2 s of CPU importing NumPy, SciPy, scikit-learn, Dask and zarr
# before sphdist runs a command (5-10 s on a loaded 2-core machine). With ``--fork`` (the
# default) each group has one server process that imports them once and forks a child per
# command: the child sets its working directory, environment, stdin (/dev/null), stdout and
# stderr (files), runs ``sphdist.cli.main`` as the entry point does, runs the atexit handlers
# and exits with the command's status. Commands with their own environment variables (read
# when a library is imported: DASK_SCHEDULER_ADDRESS) and the LocalCluster run always run in a
# fresh interpreter. ``--exec`` runs every command in a fresh interpreter; a recording made
# with --exec compares equal to one made with --fork (pipelines/results/behaviour.md).

PRELOAD = ("numpy", "scipy.sparse", "scipy.linalg", "sklearn", "sklearn.feature_extraction.text",
           "sklearn.cluster", "sklearn.metrics", "dask", "dask.array", "distributed", "zarr",
           "pandas", "pyarrow", "pyarrow.parquet", "fsspec", "tqdm", "sphdist.cli")


def serve() -> None:
    """Import the heavy libraries once, then fork one child per request read on stdin."""
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # a module that moved: imported by the command when it needs it
            pass
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        out.write(json.dumps({"exit": _fork_one(req)}) + "\n")
        out.flush()


def _fork_one(req: dict) -> int | str:
    pid = os.fork()
    if pid == 0:  # the child: becomes the command
        code: Any = 1
        try:
            os.setsid()
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            fds = [os.open(os.devnull, os.O_RDONLY),
                   os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                   os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)]
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            sys.argv = ["sphdist", *req["args"]]
            from sphdist.cli import main as sphdist_main

            try:
                sphdist_main()
                code = 0
            except SystemExit as exc:
                code = exc.code
            import atexit

            atexit._run_exitfuncs()
        except BaseException:  # pragma: no cover - the recorder's own failure
            import traceback

            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            if code is None:
                code = 0
            elif not isinstance(code, int):
                sys.stderr.write(f"{code}\n")
                sys.stderr.flush()
                code = 1
            os._exit(code)
    deadline = time.monotonic() + req["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return "timeout"
        time.sleep(0.01)


class Server:
    """One fork server per group (see :func:`serve`)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve"],
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=tempfile.gettempdir())
        assert self.proc.stdout.readline().strip() == "ready", "the fork server did not start"

    def run(self, args: list[str], cwd: Path, env: dict[str, str]) -> tuple[Any, bytes, bytes]:
        """Run one command in a forked child: its exit status, stdout and stderr."""
        with tempfile.TemporaryDirectory(prefix="sphdist-behaviour-io-") as io_dir:
            out, err = Path(io_dir, "stdout"), Path(io_dir, "stderr")
            req = {"args": args, "cwd": str(cwd), "env": env, "stdout": str(out),
                   "stderr": str(err), "timeout": RUN_TIMEOUT_S}
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            reply = json.loads(self.proc.stdout.readline())
            return reply["exit"], out.read_bytes(), err.read_bytes()

    def close(self) -> None:
        """Stop the server (its end of the requests pipe closes)."""
        self.proc.stdin.close()
        self.proc.wait()


def _exec(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[Any, bytes, bytes]:
    try:
        proc = subprocess.run([sys.executable, "-c", RUNNER, *args], cwd=cwd, env=env,
                              capture_output=True, timeout=RUN_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
        return proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        return "timeout", exc.stdout or b"", exc.stderr or b""


EXEC_ALWAYS = ("--n-workers",)  # a LocalCluster's processes: not from a forked child


def record_group(group: str, data_home: str, fork: bool = True) -> list[dict]:
    """Run one group's scenarios in a fresh temporary tree; return its records in order."""
    records = []
    tmp = Path(tempfile.mkdtemp(prefix=f"sphdist-behaviour-{group}-")).resolve()
    env = _environment()
    env["SPHDIST_DATA_HOME"] = data_home
    replacements = {str(tmp): "<TMP>", data_home: "<DATA>",
                    str(Path(data_home).resolve()): "<DATA>", sys.executable: "<PYTHON>"}
    state: dict[str, Any] = {"env": env}
    server = Server(env) if fork else None
    try:
        for step in GROUPS[group]():
            if isinstance(step, Prep):
                step.fn(tmp, state)
                continue
            args = [_subst(a, tmp) for a in step.args]
            run_env = dict(env, **{k: _subst(v, tmp) for k, v in step.env.items()})
            before = snapshot(tmp)
            started = time.perf_counter()
            if server is None or step.env or any(a in EXEC_ALWAYS for a in args):
                code, out, err = _exec(args, tmp, run_env)
            else:
                code, out, err = server.run(args, tmp, run_env)
            wall = time.perf_counter() - started
            after = snapshot(tmp)
            changed = sorted(name for name in set(before) | set(after)
                             if before.get(name) != after.get(name)
                             and not name.startswith(state.get("ignore") or "\0"))
            outputs = {normalise_text(name, replacements): describe(tmp / name, replacements)
                       for name in changed}  # first: registers the random ids they hold
            records.append({
                "key": f"{group}/{step.name}",
                "cmd": normalise_text(shlex.join(["sphdist", *args]), replacements),
                "env": {k: normalise_text(_subst(v, tmp), replacements)
                        for k, v in sorted(step.env.items())},
                "exit": code,
                "stdout": normalise_output(out.decode("utf-8", "replace"), replacements),
                "stderr": normalise_output(err.decode("utf-8", "replace"), replacements),
                "outputs": outputs,
                "_wall_s": round(wall, 2),
            })
    finally:
        background = state.get("background")
        if background is not None and background.poll() is None:
            os.killpg(background.pid, signal.SIGKILL)
            background.wait()
        if server is not None:
            server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return records


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def record(output: Path, jobs: int, only: tuple[str, ...], fork: bool) -> int:
    data_home = os.environ.get("SPHDIST_DATA_HOME")
    if not data_home:
        raise click.UsageError("set SPHDIST_DATA_HOME to the folder holding "
                               "20news-bydate.tar.gz, e.g. SPHDIST_DATA_HOME=../shared/data")
    data_home = str(Path(data_home).resolve())
    groups = [g for g in GROUPS if not only or g in only]
    probe = subprocess.run([sys.executable, "-c", "import sphdist; print(sphdist.__file__)"],
                           capture_output=True, text=True, env=_environment())
    started = time.perf_counter()
    load_before = os.getloadavg()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {g: pool.submit(record_group, g, data_home, fork) for g in groups}
        results = {g: f.result() for g, f in futures.items()}
    wall = time.perf_counter() - started
    records = [r for g in groups for r in results[g]]
    keys = [r["key"] for r in records]
    assert len(keys) == len(set(keys)), "scenario names must be unique within a group"
    meta = {
        "commit": _git("rev-parse", "HEAD"),
        # the package's tree: equal for two commits whose sphdist/ is the same
        "sphdist_tree": _git("rev-parse", "HEAD:sphdist"),
        "sphdist_uncommitted": _git("status", "--porcelain", "--", "sphdist") != "",
        "sphdist": probe.stdout.strip(), "python": sys.version.split()[0],
        "platform": platform.platform(), "n_records": len(records), "wall_s": round(wall, 1),
        "jobs": jobs, "fork": fork, "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"meta": meta, "records": records}, indent=1,
                                 ensure_ascii=False) + "\n")
    click.echo(f"{len(records)} records in {wall:.1f} s ({jobs} groups at once) -> {output}")
    return 0


# ---------------------------------------------------------------------------------------------
# Comparing
# ---------------------------------------------------------------------------------------------

COMPARED = ("cmd", "env", "exit", "stdout", "stderr", "outputs")


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def compare_records(before: list[dict], after: list[dict]) -> list[tuple[str, str, Any, Any]]:
    """Every difference between two recordings: (record key, field, before, after).

    Parameters
    ----------
    before, after : list of dict
        The ``records`` of two recordings (each with a ``key`` and the fields of
        :data:`COMPARED`).

    Returns
    -------
    list of (str, str, object, object)
        One entry per differing field; a field of ``outputs`` is named by its path
        (``outputs.m.zarr.zarr.U.sha256``); a record present in one recording only gives the
        field ``record`` with ``None`` on the other side. Empty when the recordings agree.
    """
    a = {r["key"]: r for r in before}
    b = {r["key"]: r for r in after}
    diffs: list[tuple[str, str, Any, Any]] = []
    for key in list(a) + [k for k in b if k not in a]:
        if key not in b or key not in a:
            diffs.append((key, "record", "present" if key in a else None,
                          "present" if key in b else None))
            continue
        for field in COMPARED:
            x, y = a[key].get(field), b[key].get(field)
            if x == y:
                continue
            if field == "outputs":
                fx, fy = _flatten(x, "outputs"), _flatten(y, "outputs")
                for path in list(fx) + [p for p in fy if p not in fx]:
                    if fx.get(path, "<absent>") != fy.get(path, "<absent>"):
                        diffs.append((key, path, fx.get(path, "<absent>"),
                                      fy.get(path, "<absent>")))
            else:
                diffs.append((key, field, x, y))
    return diffs


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def format_difference(key: str, field: str, x: Any, y: Any) -> str:
    head = f"--- {key}: {field}"
    sx, sy = _show(x), _show(y)
    if len(sx.splitlines()) > 1 or len(sy.splitlines()) > 1:
        diff = difflib.unified_diff(sx.splitlines(), sy.splitlines(), "before", "after",
                                    lineterm="", n=1)
        return head + "\n" + "\n".join(diff)
    return f"{head}\n  before: {sx.rstrip()}\n  after:  {sy.rstrip()}"


def compare(path_a: Path, path_b: Path) -> int:
    a, b = (json.loads(Path(p).read_text()) for p in (path_a, path_b))
    diffs = compare_records(a["records"], b["records"])
    for diff in diffs:
        click.echo(format_difference(*diff))
    n_keys = len({d[0] for d in diffs})
    click.echo(f"{len(a['records'])} records before ({a['meta'].get('commit', '?')[:7]}), "
               f"{len(b['records'])} after ({b['meta'].get('commit', '?')[:7]}): "
               f"{len(diffs)} differences in {n_keys} records")
    return 1 if diffs else 0


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--record", "record_to", type=click.Path(dir_okay=False, path_type=Path),
              help="Run every scenario and write the recording (JSON) here.")
@click.option("--compare", "compare_paths", nargs=2,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Compare two recordings: print each difference, exit 1 if any.")
@click.option("--jobs", type=click.IntRange(1), default=2, show_default=True,
              help="Groups of scenarios run at once (each group in order in its own tree).")
@click.option("--fork/--exec", default=True, show_default=True,
              help="Run the commands as children of a fork server that imported the heavy "
              "libraries once, or each in a fresh interpreter (slower; the same records).")
@click.option("--serve", is_flag=True, hidden=True)
@click.option("--only", multiple=True, type=click.Choice(list(GROUPS)),
              help="Record only these groups (repeatable; for debugging).")
def main(record_to: Path | None, compare_paths: tuple[Path, Path] | None, jobs: int,
         fork: bool, serve: bool, only: tuple[str, ...]) -> None:
    """Record the command line's behaviour, or compare two recordings."""
    if serve:
        globals()["serve"]()
        return
    if (record_to is None) == (not compare_paths):
        raise click.UsageError("give exactly one of --record OUT.json or --compare A.json B.json")
    if record_to is not None:
        sys.exit(record(record_to, jobs, only, fork))
    sys.exit(compare(*compare_paths))


if __name__ == "__main__":
    main()
