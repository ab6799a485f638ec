"""Text from users and traces made safe to print: one line, control characters escaped.

Range, kernel, device and file names come from files gapscope did not write; they may hold
newlines, terminal escape sequences, bytes that are not UTF-8 (a file name, a damaged export)
or thousands of characters. Every renderer and every message shows them through these
functions, as text (never as rich markup or Markdown).
"""

from __future__ import annotations

import os
import re

#: Names longer than this are cut (with an ellipsis) in tables and messages.
NAME_MAX = 120

# C0 and C1 control characters, DEL, lone surrogates (undecodable bytes of a file name), and the
# characters that reorder or break a terminal line: the bidi controls (U+061C, U+200E-U+200F,
# U+202A-U+202E, U+2066-U+2069: a U+202E would print the rest of a line right to left) and the
# line and paragraph separators (U+2028, U+2029).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    ch = match.group(0)
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, kept by os.fsdecode
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch, f"\\x{code:02x}")
    return f"\\u{code:04x}"


def printable(text: object, limit: int | None = None) -> str:
    """``text`` as one printable line: control characters, bidi controls and undecodable bytes
    written as escapes (``\\n``, ``\\x1b``, ``\\u202e``, ``\\xff``), cut to ``limit`` characters
    (with ``…``) if given."""
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    s = _UNPRINTABLE.sub(_escape, str(text))
    if limit is not None and len(s) > limit:
        s = s[: max(limit - 1, 0)] + "…"
    return s


def one_line(text: object) -> str:
    """A message as one printable line: its lines joined with spaces, then :func:`printable`."""
    return printable(" ".join(str(text).split("\n")).replace("\r", " ").strip())


def name(text: object) -> str:
    """A name for a table cell or a message: printable and cut to :data:`NAME_MAX`."""
    return printable(text, NAME_MAX)
