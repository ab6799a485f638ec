"""One resolver for every path a command is given: what it holds, decided once, worded once.

:func:`resolve` looks at a path (without importing numpy or pandas, so a bad path is refused at
once) and returns an :class:`Input`:

==============  ===========================================================================
kind            what it is
==============  ===========================================================================
``trace``       a trace file; ``format`` names its reader (``nsys-sqlite``)
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
#: What gapscope reads, for messages that refuse something else.
READS = "an nsys SQLite export, a gapscope result JSON, or a `gapscope run` output folder"

KIND_WORDS = {
    "trace": "a trace",
    "analysis": "a saved analysis result (JSON)",
    "fleet": "a saved many-trace result (JSON)",
    "run": "a `gapscope run` output",
}

_SCHEMA = re.compile(rb'"schema"\s*:\s*"([^"\\]{1,100})"')
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


def regular_file(path: str | os.PathLike[str], given: str | None = None) -> os.stat_result:
    """The stat of ``path`` when it is a regular file (checked before anything opens it, so a
    pipe or a device can never block a read); GapscopeError otherwise."""
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
    return st


def resolve(path: str | os.PathLike[str]) -> Input:
    """What ``path`` holds; GapscopeError (exit 2) when gapscope cannot read it."""
    given = os.fspath(path)
    p = Path(given)
    if p.is_dir():
        return _folder(given, p)
    regular_file(p, given)
    if p.suffix in NSYS_REPORT_SUFFIXES:
        raise GapscopeError(
            f"{given}: is an Nsight Systems report, not its SQLite export; "
            f"run `nsys export --type sqlite {given}` first"
        )
    try:
        with open(p, "rb") as fh:
            head = fh.read(65536)
    except OSError as exc:
        raise GapscopeError(f"{given}: cannot read ({exc.strerror or exc})") from None
    if head.startswith(SQLITE_MAGIC):
        return Input(given, p, "trace", "nsys-sqlite")
    if head.lstrip()[:1] in (b"{", b"[") or p.suffix.lower() == ".json":
        kind, schema = _json_kind(p, head, given)
        return Input(given, p, kind, schema)
    raise GapscopeError(f"{given}: not a SQLite file or a gapscope result JSON (gapscope reads {READS})")


def _folder(given: str, p: Path) -> Input:
    if (p / "run.json").is_file() or (p / "analysis.json").is_file():
        return Input(given, p, "run", "gapscope-run folder")
    raise GapscopeError(f"{given}: is a directory, not an nsys SQLite export or a `gapscope run` "
                        "output folder (no run.json in it)")


def _json_kind(p: Path, head: bytes, given: str) -> tuple[str, str]:
    """(kind, schema) of a JSON file, from its head when the schema is written first (as
    gapscope writes it), else from the whole object."""
    m = _SCHEMA.search(head) if head.lstrip()[:1] == b"{" else None
    schema = m.group(1).decode("utf-8", "replace") if m else None
    if schema is None:
        found = read_json(p, given).get("schema")
        schema = found if isinstance(found, str) else None
    for prefix, kind in _SCHEMA_KINDS:
        if schema is not None and schema.startswith(prefix):
            return kind, schema
    what = "no 'schema' field" if schema is None else f"schema {schema!r}"
    raise GapscopeError(f"{given}: a JSON file but not a gapscope result ({what}; "
                        "expected gapscope.analysis/N)")


def natural_key(text: str) -> list[Any]:
    """Sort key that puts ``rank2`` before ``rank10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def expand(args: Sequence[str]) -> list[str]:
    """The files the command line names: paths as given, a folder's ``*.sqlite`` exports (a
    `gapscope run` folder stays one input) and the matches of a quoted glob, in natural order,
    each file once. A single path comes back as given."""
    found: list[str] = []
    for arg in args:
        p = Path(arg)
        if p.is_dir() and not ((p / "run.json").is_file() or (p / "analysis.json").is_file()):
            inside = [str(q) for q in p.glob("*.sqlite") if q.is_file()]
            if not inside:
                raise GapscopeError(f"{arg}: is a directory with no .sqlite exports in it")
            found += inside
        elif not p.exists() and _GLOB_CHARS.search(arg):
            matches = [m for m in glob.glob(arg) if not Path(m).is_dir()]
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
