"""The one error type gapscope raises for problems a user can fix."""

from __future__ import annotations


class GapscopeError(Exception):
    """A user-facing failure: one line of text and the exit code the CLI should return.

    Exit codes: 1 = a regression (compare) or some inputs failed; 2 = bad input or usage.
    """

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message
