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
