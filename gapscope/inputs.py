"""One resolver for every path a command is given: what it holds, decided once, worded once.

:func:`resolve` looks at a path (without importing numpy or pandas, so a bad path is refused at
once) and returns an :class:`Input`:

==============  ===========================================================================
kind            what it is
==============  ===========================================================================
``trace``       a trace; ``format`` names its reader: ``nsys-sqlite`` (an nsys SQLite export),
                ``nsys-parquet`` / ``nsys-arrow`` (a folder written by ``nsys export --type
                parquetdir`` / ``arrowdir``), ``nsys-rep`` (an Nsight Systems report, exported
                with nsys when read), ``kineto`` (a PyTorch profiler trace, ``.json`` or
                ``.json.gz``)
``analysis``    a result JSON of ``gapscope analyze`` (schema ``gapscope.analysis/N``)
``fleet``       a merged result of several traces (schema ``gapscope.fleet/N``)
``run``         a ``gapscope run`` output folder, or its ``run.json``
==============  ===========================================================================

:func:`expand` turns the command line's paths (files, folders of exports, quoted globs) into the
list of files a many-trace command reads. Every refusal is a GapscopeError whose message starts
with the path. Only regular files are ever opened (:func:`regular_file`: a pipe or a device is
refused before anything could block on it), and JSON is read strictly (:func:`read_json`: no
NaN or Infinity, at most MAX_JSON_DEPTH levels deep).
"""

from __future__ import annotations

import glob
import json
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapscope.errors import GapscopeError

if TYPE_CHECKING:
    from gapscope.trace import Trace

SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
NSYS_REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"
GZIP_MAGIC = b"\x1f\x8b"
PARQUET_MAGIC = b"PAR1"
ARROW_FILE_MAGIC = b"ARROW1"
ARROW_STREAM_MAGIC = b"\xff\xff\xff\xff"
#: The table files of nsys's columnar exports, by format, and tables any such export holds.
COLUMNAR_SUFFIXES = {"nsys-parquet": ".parquet", "nsys-arrow": ".arrow"}
NSYS_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA", "StringIds", "CUPTI_ACTIVITY_KIND_KERNEL",
               "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "TARGET_INFO_GPU")
#: How much of a (decompressed) JSON file is searched for its top-level keys.
JSON_HEAD_BYTES = 1 << 20
#: What gapscope reads, for messages that refuse something else.
READS = ("an nsys export (SQLite, or a parquetdir or arrowdir folder), an Nsight Systems report "
         "(.nsys-rep, exported with nsys), a PyTorch profiler trace (.json, .json.gz), a gapscope "
         "result JSON, or a `gapscope run` output folder")

KIND_WORDS = {
    "trace": "a trace",
    "analysis": "a saved analysis result (JSON)",
    "fleet": "a saved many-trace result (JSON)",
    "run": "a `gapscope run` output",
}

_SCHEMA = re.compile(rb'"schema"\s*:\s*"([^"\\]{1,100})"')
_TRACE_EVENTS = re.compile(rb'"traceEvents"\s*:')
_GLOB_CHARS = re.compile(r"[*?[]")
_SCHEMA_KINDS = (("gapscope.analysis/", "analysis"), ("gapscope.fleet/", "fleet"),
                 ("gapscope-run/", "run"), ("gapscope.run/", "run"))


@dataclass(frozen=True)
class Input:
    """A resolved path: ``kind`` (see the module docstring), ``format`` (a trace's reader name,
    or a JSON's schema), ``path`` (the file or folder to read) and ``given`` (as typed)."""

    given: str
    path: Path
    kind: str
    format: str

    @property
    def label(self) -> str:
        """The name reports show for this input: the file's (or folder's) name."""
        return self.path.name

    def require(self, *kinds: str, command: str = "this command") -> "Input":
        """This input, or a GapscopeError naming what it is and what ``command`` reads."""
        if self.kind not in kinds:
            wanted = " or ".join(KIND_WORDS[k] for k in kinds)
            raise GapscopeError(f"{self.given}: {KIND_WORDS[self.kind]}; {command} reads {wanted}")
        return self

    def open(self) -> "Trace":
        """The trace, open (a context manager that owns its connection)."""
        self.require("trace")
        from gapscope.trace.handle import open_trace

        return open_trace(self.path, self.format)

    def json(self) -> dict[str, Any]:
        """The JSON object of a saved result, or of a run's run.json."""
        path = self.run_file("run.json") if self.kind == "run" and self.path.is_dir() else self.path
        if not path.is_file():
            raise GapscopeError(f"{self.given}: a `gapscope run` output folder without run.json")
        return read_json(path, self.given if path == self.path else None)

    def run_file(self, name: str) -> Path:
        """A file of a `gapscope run` output folder (``analysis.json``, ``run.json``, ...)."""
        folder = self.path if self.path.is_dir() else self.path.parent
        return folder / name


#: Nesting deeper than this is not a gapscope result (ours is at most 4 levels deep).
MAX_JSON_DEPTH = 64


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def read_json(path: Path, given: str | None = None) -> dict[str, Any]:
    """A JSON object from ``path``, or one clear error line (naming ``given``, the path as the
    user typed it, when there is one). Strict JSON only: ``NaN`` and ``Infinity`` are refused,
    and so is nesting deeper than :data:`MAX_JSON_DEPTH`."""
    name = given or str(path)
    regular_file(path, name)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh, parse_constant=_no_constant)
    except FileNotFoundError:
        raise GapscopeError(f"{name}: no such file") from None
    except UnicodeDecodeError:
        raise GapscopeError(f"{name}: not a gapscope result JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise GapscopeError(f"{name}: not valid JSON (line {exc.lineno}, column {exc.colno}: "
                            f"{exc.msg}); expected a gapscope result JSON") from None
    except ValueError as exc:  # NaN, Infinity (or a number too long to convert)
        raise GapscopeError(f"{name}: not strict JSON ({exc} is not a JSON number)") from None
    except RecursionError:
        raise GapscopeError(f"{name}: JSON nested too deeply to be a gapscope result") from None
    except OSError as exc:
        raise GapscopeError(f"{name}: cannot read ({exc.strerror or exc})") from None
    if not isinstance(data, dict):
        raise GapscopeError(f"{name}: not a gapscope result (a JSON object was expected)")
    if json_depth(data) > MAX_JSON_DEPTH:
        raise GapscopeError(f"{name}: JSON nested more than {MAX_JSON_DEPTH} levels deep; "
                            "not a gapscope result")
    return data


def json_depth(data: Any) -> int:
    """How deep lists and objects nest in ``data`` (a scalar is 0), without recursion."""
    deepest = 0
    todo = [(data, 1)]
    while todo:
        value, depth = todo.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if depth <= MAX_JSON_DEPTH:  # deeper is refused anyway: stop walking
            todo.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


#: A file at least this long whose blocks on disk hold less than 1/SPARSE_RATIO of it, and in
#: which the system reports a hole, is sparse: its holes read as zeros, no trace holds them.
SPARSE_MIN_BYTES = 64 << 20
SPARSE_RATIO = 64


def _sparse(path: str | os.PathLike[str], st: os.stat_result) -> bool:
    """Whether a regular file is sparse (SPARSE_MIN_BYTES, SPARSE_RATIO): its allocated blocks
    far fewer than its length, and a hole before its end (``SEEK_HOLE``: a compressing file
    system stores few blocks but reports no hole). Unknown is not sparse."""
    blocks = getattr(st, "st_blocks", None)
    if blocks is None or st.st_size < SPARSE_MIN_BYTES or blocks * 512 * SPARSE_RATIO >= st.st_size:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            return os.lseek(fd, 0, os.SEEK_HOLE) < st.st_size
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        return False


def _size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n:,} bytes"


def regular_file(path: str | os.PathLike[str], given: str | None = None) -> os.stat_result:
    """The stat of ``path`` when it is a regular file that is not sparse (checked before anything
    reads it, so a pipe or a device can never block a read, and the zeros of a hole are never
    parsed); GapscopeError otherwise."""
    name = given or os.fspath(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise GapscopeError(f"{name}: no such file") from None
    except (OSError, ValueError) as exc:
        raise GapscopeError(f"{name}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise GapscopeError(f"{name}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise GapscopeError(f"{name}: not a regular file (a pipe, socket or device); give a file")
    if _sparse(path, st):
        raise GapscopeError(f"{name}: a sparse file ({_size(st.st_size)} long, {_size(st.st_blocks * 512)} of it "
                            "on disk): its holes read as zeros, which no trace holds; give the file as it was written")
    return st


def resolve(path: str | os.PathLike[str]) -> Input:
    """What ``path`` holds; GapscopeError (exit 2) when gapscope cannot read it."""
    given = os.fspath(path)
    p = Path(given)
    if p.is_dir():
        return _folder(given, p)
    regular_file(p, given)
    try:
        with open(p, "rb") as fh:
            head = fh.read(65536)
    except OSError as exc:
        raise GapscopeError(f"{given}: cannot read ({exc.strerror or exc})") from None
    if head.startswith(NSYS_REPORT_MAGIC) or p.suffix in NSYS_REPORT_SUFFIXES:
        return Input(given, p, "trace", "nsys-rep")
    if head.startswith(SQLITE_MAGIC):
        return Input(given, p, "trace", "nsys-sqlite")
    if head.startswith(GZIP_MAGIC):
        inflated = _gunzip_head(p, given)
        if _TRACE_EVENTS.search(inflated):
            return Input(given, p, "trace", "kineto")
        _refuse_rocprof(inflated, given)
        raise GapscopeError(f"{given}: a gzip file, but not a gzipped PyTorch profiler trace (no "
                            f"traceEvents near its start; gapscope reads {READS})")
    if head.startswith(PARQUET_MAGIC) or head.startswith(ARROW_FILE_MAGIC) or (
            head.startswith(ARROW_STREAM_MAGIC) and p.suffix == ".arrow"):
        raise GapscopeError(f"{given}: one table of a columnar export; give the whole folder that "
                            f"`nsys export --type parquetdir` or `arrowdir` wrote ({p.parent})")
    if head.lstrip()[:1] in (b"{", b"[") or p.suffix.lower() == ".json":
        kind, schema = _json_kind(p, head, given)
        return Input(given, p, kind, schema)
    raise GapscopeError(f"{given}: not a SQLite file, a PyTorch profiler trace or a gapscope result "
                        f"JSON (gapscope reads {READS})")


def columnar_format(p: Path) -> str | None:
    """``nsys-parquet`` or ``nsys-arrow`` when the folder holds nsys's tables as ``.parquet``
    or ``.arrow`` files (what `nsys export --type parquetdir|arrowdir` writes), else None."""
    for fmt, suffix in COLUMNAR_SUFFIXES.items():
        if any((p / f"{t}{suffix}").is_file() for t in NSYS_TABLES):
            return fmt
    return None


def _folder(given: str, p: Path) -> Input:
    if (p / "run.json").is_file() or (p / "analysis.json").is_file():
        return Input(given, p, "run", "gapscope-run folder")
    fmt = columnar_format(p)
    if fmt is not None:
        return Input(given, p, "trace", fmt)
    try:
        found = sorted({q.suffix for q in p.iterdir() if q.suffix in (".parquet", ".arrow")})
    except OSError as exc:
        raise GapscopeError(f"{given}: cannot read the folder ({exc.strerror or exc})") from None
    what = (f"its {' and '.join(found)} files are not nsys's tables (no META_DATA_EXPORT, StringIds, "
            "CUPTI_ACTIVITY_KIND_KERNEL, ...)" if found else
            "no nsys export tables (.parquet or .arrow) and no run.json in it")
    raise GapscopeError(f"{given}: is a directory, not an nsys export folder or a `gapscope run` "
                        f"output folder: {what} (gapscope reads {READS})")


_ROCPROF = re.compile(rb'^\s*\{\s*"rocprofiler-sdk-tool"\s*:')


def _refuse_rocprof(head: bytes, given: str) -> None:
    """GapscopeError for rocprofv3's JSON (``--output-format json``: an object whose one key is
    ``rocprofiler-sdk-tool``), which gapscope does not read."""
    if _ROCPROF.match(head):
        raise GapscopeError(f"{given}: a rocprofv3 JSON (rocprofiler-sdk-tool), which gapscope does not read; "
                            "record the program with the PyTorch profiler instead (torch.profiler on ROCm "
                            "writes a Kineto trace: `gapscope profile --tracer torch -- python PROGRAM`)")


def _gunzip_head(p: Path, given: str) -> bytes:
    """The first JSON_HEAD_BYTES of a gzipped file, decompressed; a truncated or damaged file
    gives what could be decompressed (its reader reports the damage)."""
    import zlib

    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = b""
    try:
        with open(p, "rb") as fh:
            while len(out) < JSON_HEAD_BYTES and not inflate.eof:
                chunk = fh.read(65536)
                if not chunk:
                    break
                out += inflate.decompress(chunk, JSON_HEAD_BYTES - len(out))
    except zlib.error:
        pass
    except OSError as exc:
        raise GapscopeError(f"{given}: cannot read ({exc.strerror or exc})") from None
    return out


def _json_kind(p: Path, head: bytes, given: str) -> tuple[str, str]:
    """(kind, format) of a JSON file: a gapscope result by its schema (from the head when the
    schema is written first, as gapscope writes it), a PyTorch profiler trace by its
    traceEvents, else from the whole object; rocprofv3's JSON is refused, saying what to record
    instead."""
    _refuse_rocprof(head, given)
    m = _SCHEMA.search(head) if head.lstrip()[:1] == b"{" else None
    schema = m.group(1).decode("utf-8", "replace") if m else None
    if head.lstrip()[:1] == b"{":
        with open(p, "rb") as fh:
            events = _TRACE_EVENTS.search(fh.read(JSON_HEAD_BYTES))
        if events and (m is None or events.start() < m.start()):  # the top-level key comes first
            return "trace", "kineto"
    if schema is None and head.lstrip()[:1] == b"[":
        raise GapscopeError(f"{given}: a JSON array, neither a gapscope result nor a PyTorch profiler "
                            f"trace (an object with traceEvents; gapscope reads {READS})")
    if schema is None:
        data = read_json(p, given)
        if "traceEvents" in data:
            return "trace", "kineto"
        found = data.get("schema")
        schema = found if isinstance(found, str) else None
    for prefix, kind in _SCHEMA_KINDS:
        if schema is not None and schema.startswith(prefix):
            return kind, schema
    what = "no 'schema' or 'traceEvents' field" if schema is None else f"schema {schema!r}"
    raise GapscopeError(f"{given}: a JSON file but neither a gapscope result nor a PyTorch profiler "
                        f"trace ({what}; gapscope reads {READS})")


#: Name endings that say what a trace file is, longest first (trace_stem drops them).
TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json", ".sqlite", ".nsys-rep", ".qdrep")


def trace_stem(path: str | os.PathLike[str]) -> str:
    """A trace's short name: its file name without the ending that says what it is
    (``rank3.pt.trace.json.gz`` gives ``rank3``); a folder's name as it is."""
    name = Path(path).name
    for suffix in TRACE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name if Path(path).is_dir() else Path(path).stem


def natural_key(text: str) -> list[Any]:
    """Sort key that puts ``rank2`` before ``rank10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


#: The names of trace files a folder given to a many-trace command is searched for.
TRACE_GLOBS = ("*.sqlite", "*.pt.trace.json", "*.pt.trace.json.gz")


def folder_traces(p: Path) -> list[str]:
    """The traces inside a folder: its nsys SQLite exports, PyTorch profiler traces
    (``*.pt.trace.json[.gz]``, TensorBoard's layout; any other ``*.json[.gz]`` whose first bytes
    say it is one, as HTA's ``rank-N.json.gz``) and columnar export folders; its ``.nsys-rep``
    reports only when it holds none of those (a report beside its own export would count
    twice)."""
    found = [str(q) for g in TRACE_GLOBS for q in p.glob(g) if q.is_file()]
    named = set(found)
    for q in sorted(p.glob("*.json")) + sorted(p.glob("*.json.gz")):
        if str(q) not in named and q.is_file() and _is_kineto(q):
            found.append(str(q))
    found += [str(q) for q in p.iterdir() if q.is_dir() and columnar_format(q)]
    if not found:
        found = [str(q) for s in NSYS_REPORT_SUFFIXES for q in p.glob(f"*{s}") if q.is_file()]
    return found


def _is_kineto(q: Path) -> bool:
    """Whether a JSON file in a folder is a PyTorch profiler trace (by its first bytes; a file
    that cannot be read or is anything else is not)."""
    try:
        return resolve(q).format == "kineto"
    except GapscopeError:
        return False


def expand(args: Sequence[str]) -> list[str]:
    """The traces the command line names: paths as given, a folder's traces (folder_traces; a
    `gapscope run` folder or an export folder stays one input) and the matches of a quoted
    glob, in natural order, each once. A single path comes back as given."""
    found: list[str] = []
    for arg in args:
        p = Path(arg)
        if p.is_dir() and not ((p / "run.json").is_file() or (p / "analysis.json").is_file()
                               or columnar_format(p)):
            inside = folder_traces(p)
            if not inside:
                raise GapscopeError(f"{arg}: is a directory with no traces in it (no .sqlite exports, "
                                    "PyTorch profiler traces, export folders or .nsys-rep reports)")
            found += inside
        elif not p.exists() and _GLOB_CHARS.search(arg):
            matches = [m for m in glob.glob(arg) if not Path(m).is_dir() or columnar_format(Path(m))]
            if not matches:
                raise GapscopeError(f"no file matches {arg!r}")
            found += matches
        else:
            found.append(arg)
    if len(found) == 1:
        return found
    seen: set[str] = set()
    unique = []
    for f in sorted(found, key=natural_key):
        key = os.path.abspath(f)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique
