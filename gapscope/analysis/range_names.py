"""How NVTX range names are grouped, without numpy or pandas (the renderers of a saved or cached
result use it too): PyTorch's ``emit_nvtx`` makes every op's range name unique with a tail of
ids and shapes, which grouping takes off (docs/metrics.md, "Range names")."""

from __future__ import annotations

import re

#: The tail PyTorch's ``torch.autograd.profiler.emit_nvtx`` adds to an op's range name, in the
#: order it writes the fields; grouping by name takes it off (docs/metrics.md, "Range names").
OP_SUFFIX = r"(?:, seq = \d+)?(?:, op_id = \d+)?(?:, sizes = \[.*\])?(?:, input_op_ids = \[.*\])?$"
_OP_SUFFIX = re.compile(OP_SUFFIX)


def group_name(name: str) -> str:
    """One range name without its emit_nvtx tail (``aten::mm, seq = 1, op_id = 2`` is ``aten::mm``)."""
    return _OP_SUFFIX.sub("", name, count=1)
