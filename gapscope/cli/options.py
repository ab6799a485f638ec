"""Options several commands share: ``--indent`` for their JSON, ``--no-cache`` for the column and
result caches of the traces they read (gapscope.cache)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import click

from gapscope.cache import turned_off
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
    """The ``--no-cache`` option of the commands that read traces (gapscope.cache)."""
    return click.option("--no-cache", "no_cache", is_flag=True,
                        help="Neither read nor keep columnar copies of SQLite exports, nor results, in "
                             "gapscope's cache folder (also: GAPSCOPE_NO_CACHE=1).")(command)


def cache_setting(no_cache: bool) -> AbstractContextManager[None]:
    """What ``--no-cache`` asks for, as a context to run the command's work in."""
    return turned_off() if no_cache else nullcontext()
