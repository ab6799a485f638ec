"""Text inside Markdown, written once for every Markdown renderer: table cells, code spans and
prose that comes from files (names, paths, warnings), none of it ever read as markup."""

from __future__ import annotations

import re
from typing import Any

from gapscope.text import name, printable

# Emphasis, link, code and strike-through characters; an underscore only where it could open or
# close emphasis (GitHub reads none inside a word: decode_step stays as it is).
_MARKUP = re.compile(r"([*\[\]`~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def cell(value: Any) -> str:
    """Text safe inside a table cell: one printable line, backslashes, pipes and HTML brackets
    escaped."""
    return (printable(value).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")
            .replace(">", "&gt;"))


def code(value: Any) -> str:
    """A name as an inline code span (cut to gapscope.text.NAME_MAX) that survives backticks
    and pipes."""
    return f"`{cell(name(value)).replace('`', chr(39))}`"


def prose(value: Any) -> str:
    """Text from a file in running text: as :func:`cell`, with Markdown's emphasis, link, code
    and strike-through characters and HTML entities escaped too."""
    return _MARKUP.sub(r"\\\1", cell(str(value).replace("&", "&amp;")))
