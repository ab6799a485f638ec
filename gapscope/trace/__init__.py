"""Reading traces: a handle per open trace file (``open_trace``), typed frames out.

``frames`` holds the format-neutral frames every reader fills; ``nsys_sqlite`` reads nsys's
SQLite export; ``cuda_api`` names CUDA calls by what they do.
"""

from gapscope.trace.frames import ActivityKind, ClosedTraceError, TraceFrames, TraceMeta
from gapscope.trace.handle import Trace, open_trace

__all__ = ["ActivityKind", "ClosedTraceError", "Trace", "TraceFrames", "TraceMeta", "open_trace"]
