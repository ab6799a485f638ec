"""gapscope's cache files as the tests read and write them, spelled out here (not gapscope's own
code): a first line naming the layout, the file's place under the cache folder and the content
digest it is for, then the body, then the CRC-32 of all that."""

from __future__ import annotations

import zlib
from pathlib import Path


def sealed_body(path: Path, place: str, content: str = "-") -> bytes:
    """The body of a cache file as gapscope seals it, checked here: a first line naming its
    layout, its place under the cache folder and the content digest it is for, then the body,
    then the CRC-32 of all that."""
    data = path.read_bytes()
    assert zlib.crc32(data[:-4]).to_bytes(4, "big") == data[-4:], path
    header = f"gapscope-cache/2 {place} {content}\n".encode()
    assert data.startswith(header), data[:200]
    return data[len(header):-4]


def seal(place: str, body: bytes, content: str = "-") -> bytes:
    """A cache file's bytes as gapscope writes them (sealed_body's layout)."""
    data = f"gapscope-cache/2 {place} {content}\n".encode() + body
    return data + zlib.crc32(data).to_bytes(4, "big")
