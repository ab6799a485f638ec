"""What every figure shares: matplotlib imported lazily on the Agg canvas (no pyplot, no global
backend change), the colours of kernels and gap categories, time labels, and saving to PNG/SVG."""

from __future__ import annotations

import io

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gapscope.catalog import CATEGORIES, GAP_COLOUR
from gapscope.errors import GapscopeError

FORMATS = ("png", "svg")
DPI = 100
MAX_PALETTE_ERROR = 6

#: One colour per gap category (gapscope.catalog: Okabe-Ito, readable with colour-vision
#: deficiencies; host time a light tint of launch, which it sits beside).
CATEGORY_COLORS = {c.name: c.colour for c in CATEGORIES}
GAP_COLOR = GAP_COLOUR  # a gap without attribution
KERNEL_COLOR = "#1B1B1B"
MEMOP_COLOR = "#8C5A00"
RANGE_COLOR = "#6A7FA8"

RC = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "svg.fonttype": "none",  # text stays text: small, searchable SVG
    "svg.hashsalt": "gapscope",  # reproducible SVG ids
}


def require_matplotlib() -> Any:
    """The matplotlib module, or a one-line GapscopeError saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise GapscopeError(
            "drawing needs matplotlib, which is not installed: pip install matplotlib "
            "(or, in a gapscope checkout, pip install -e '.[plot]')") from None
    return matplotlib


def context() -> Any:
    """gapscope's rc settings, for the whole of drawing and saving one figure."""
    return require_matplotlib().rc_context(RC)


def new_figure(width_in: float, height_in: float) -> Any:
    """A Figure on an Agg canvas (call inside ``context()``)."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def save(fig: Any, base: Path, formats: Sequence[str]) -> list[Path]:
    """Write ``base.<fmt>`` for each format, each file whole or not at all (gapscope.files: a
    full disk is one line naming the file); returns the paths."""
    from gapscope.files import write_bytes

    out = []
    for fmt in formats:
        path = base.with_suffix(f".{fmt}")
        buf = io.BytesIO()
        if fmt == "png":
            _save_png(fig, buf)
        else:
            fig.savefig(buf, format=fmt, dpi=DPI, metadata={"Date": None, "Creator": None})
        write_bytes(path, buf.getvalue())
        out.append(path)
    return out


def _save_png(fig: Any, out: io.BytesIO) -> None:
    """A PNG in a 256-colour palette when that loses nothing visible (no pixel off by more than
    MAX_PALETTE_ERROR of 255 in any channel), else a full-colour one. These flat figures shrink
    2-3x; Pillow comes with matplotlib."""
    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    buf.seek(0)
    with Image.open(buf) as img:
        rgb = img.convert("RGB")
    pal = rgb.quantize(256, method=Image.Quantize.MAXCOVERAGE, dither=Image.Dither.NONE)
    err = np.abs(np.asarray(pal.convert("RGB"), dtype=np.int16) - np.asarray(rgb, dtype=np.int16))
    (pal if err.max() <= MAX_PALETTE_ERROR else rgb).save(out, format="PNG", optimize=True)


def check_formats(formats: Sequence[str]) -> tuple[str, ...]:
    """The formats, validated: png and/or svg."""
    fmts = tuple(dict.fromkeys(f.strip().lower() for f in formats if f.strip()))
    bad = [f for f in fmts if f not in FORMATS]
    if bad or not fmts:
        raise GapscopeError(f"--format wants png and/or svg (comma-separated), got {','.join(formats)!r}")
    return fmts


def time_unit(span_ns: float) -> tuple[str, float]:
    """(unit, ns per unit) that keeps an axis of ``span_ns`` in readable numbers."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if span_ns >= 2 * scale:
            return unit, scale
    return "ns", 1.0

