"""Options several commands share: ``--indent`` for their JSON, ``--no-cache`` for the column
cache of the traces they read (gapscope.trace.cache)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import click

from gapscope.errors import GapscopeError


def indent_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--indent N`` option of the commands that write JSON."""
    return click.option("--indent", type=click.IntRange(min=0), default=None, metavar="N",
                        help="JSON output indented by N spaces (default: compact, no whitespace).")(command)


def json_options(fmt: str, indent: int | None) -> dict[str, Any]:
    """The JSON renderer's options for ``--indent`` (none for another format, which refuses it)."""
    if indent is None:
        return {}
    if fmt != "json":
        raise GapscopeError(f"--indent applies to JSON output, not --format {fmt}")
    return {"indent": indent}


def cache_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--no-cache`` option of the commands that read traces (gapscope.trace.cache)."""
    return click.option("--no-cache", "no_cache", is_flag=True,
                        help="Neither read nor keep columnar copies of SQLite exports in gapscope's "
                             "cache folder (also: GAPSCOPE_NO_CACHE=1).")(command)


def cache_setting(no_cache: bool) -> AbstractContextManager[None]:
    """What ``--no-cache`` asks for, as a context to run the command's work in (imported only
    when given: gapscope.trace imports pandas, which a refused path never needs)."""
    if not no_cache:
        return nullcontext()
    from gapscope.trace.cache import turned_off

    return turned_off()
