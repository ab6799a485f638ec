"""The one error type gapscope raises for problems a user can fix, and the exit codes.

Exit codes: 0 = done; 1 = a regression (compare) or some inputs failed; 2 = bad input or usage
(a GapscopeError); 3 = an internal error, a bug in gapscope (anything else that escaped).
"""

from __future__ import annotations

import os
import traceback

from gapscope.text import one_line, printable

EXIT_REGRESSION = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3

#: Where a bug is reported (named in the internal-error line).
ISSUE_TRACKER = "the gapscope issue tracker"


class GapscopeError(Exception):
    """A user-facing failure: one line of text and the exit code the CLI should return.

    The message is kept to one printable line (newlines and control characters escaped), so
    text from a damaged file cannot break the one-line error.
    """

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        message = one_line(message)
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


#: Import names that differ from the name of the package (the distribution) that brings them.
_MODULE_ALIASES = {"cupy-cuda12x": ("cupy",), "cupy-cuda13x": ("cupy",), "cuda-bindings": ("cuda",),
                   "dask": ("dask", "distributed")}


def _requirements() -> list[str]:
    """gapscope's requirements as pip writes them (``matplotlib>=3.7; extra == "plot"``): from
    the installed package's metadata, else from the pyproject.toml of the checkout it runs from."""
    import importlib.metadata

    try:
        return list(importlib.metadata.requires("gapscope") or [])
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        import tomllib
    except ImportError:  # Python 3.10
        return []
    try:
        with open(os.path.join(os.path.dirname(_PACKAGE), "pyproject.toml"), "rb") as fh:
            project = tomllib.load(fh)["project"]
    except (OSError, KeyError, ValueError):
        return []
    return [*project.get("dependencies", []),
            *(f'{r}; extra == "{extra}"' for extra, reqs in project.get("optional-dependencies", {}).items()
              for r in reqs)]


def missing_dependency_line(exc: BaseException) -> str | None:
    """The one line for a package gapscope needs that is not installed (a ModuleNotFoundError of
    one of its requirements): the package, and the install that brings it (the extra that lists
    it, or gapscope itself); None for any other error."""
    import re

    module = getattr(exc, "name", None)
    if not isinstance(exc, ModuleNotFoundError) or not module:
        return None
    top = module.split(".")[0]
    base, extras = None, {}  # the requirement, or each extra listing it with its package
    for req in _requirements():
        dist = re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0]
        if top not in _MODULE_ALIASES.get(dist, (dist.replace("-", "_"),)):
            continue
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", req)
        if extra is None:
            base = dist
        elif extra.group(1) not in ("all", "test"):
            extras.setdefault(extra.group(1), dist)
    if base is not None:
        return f"gapscope: error: {base} is missing: pip install -e . in the gapscope checkout brings it"
    if not extras:
        return None
    how = " or ".join(f"pip install -e '.[{e}]'" for e in extras)
    named = " or ".join(dict.fromkeys(extras.values()))
    return (f"gapscope: error: {named} is missing: {how} in the gapscope checkout brings it "
            f"(the {' or '.join(extras)} extra)")


#: The folder of the gapscope package: a bug's place is the last frame inside it.
_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def internal_error_line(exc: BaseException, version: str) -> str:
    """The one line printed for a bug: what was raised, where in gapscope, and where to report it."""
    where = ""
    # Frames in the package itself, not any file whose path says "gapscope" (a checkout named
    # gapscope, the user's own ~/gapscope-runs/script.py).
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.abspath(f.filename).startswith(_PACKAGE + os.sep)]
    if frames:
        last = frames[-1]
        path = "gapscope/" + os.path.relpath(os.path.abspath(last.filename), _PACKAGE).replace("\\", "/")
        where = f" at {path}:{last.lineno}"
    what = printable(f"{type(exc).__name__}: {exc}", 300)
    return (f"gapscope: internal error (a bug in gapscope {version}, not in your input): {what}{where}; "
            f"please report it on {ISSUE_TRACKER} with this line and the command you ran")
