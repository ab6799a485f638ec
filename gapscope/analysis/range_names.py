"""How NVTX range names are grouped, without numpy or pandas (the renderers of a saved or cached
result use it too): PyTorch's ``emit_nvtx`` makes every op's range name unique with a tail of
ids and shapes, and step markers carry their step's number (``ProfilerStep#12``); grouping takes
both off (docs/metrics.md, "Range names")."""

from __future__ import annotations

import re

#: The tail PyTorch's ``torch.autograd.profiler.emit_nvtx`` adds to an op's range name, in the
#: order it writes the fields; grouping by name takes it off (docs/metrics.md, "Range names").
OP_SUFFIX = r"(?:, seq = \d+)?(?:, op_id = \d+)?(?:, sizes = \[.*\])?(?:, input_op_ids = \[.*\])?$"
_OP_SUFFIX = re.compile(OP_SUFFIX)
#: A numbered step marker: a name that ends in ``#`` and a number (the PyTorch profiler's
#: ``ProfilerStep#N``), or a step, iteration, epoch or batch word and a number (``step 12``,
#: ``iteration_3``). Its group replaces the number with ``*``, the glob that selects them all
#: (``ProfilerStep#*``); group ``1`` is what is kept (RE2 and Python ``re`` read it alike).
STEP_MARKER = r"^(.*#|(?i:step|iter|iteration|epoch|batch)[ _:-]?)\d+$"
STEP_GROUP = r"\1*"
_STEP_MARKER = re.compile(STEP_MARKER)


def group_name(name: str) -> str:
    """One range name as its instances are grouped: without its emit_nvtx tail (``aten::mm, seq
    = 1, op_id = 2`` is ``aten::mm``), a step marker's number a ``*`` (``ProfilerStep#*``)."""
    return _STEP_MARKER.sub(STEP_GROUP, _OP_SUFFIX.sub("", name, count=1), count=1)


def instance_name(name: str) -> str:
    """A range instance's name as the report's instance table shows it: without its emit_nvtx
    tail, a step marker's number kept (it says which step the instance is)."""
    return _OP_SUFFIX.sub("", name, count=1)
