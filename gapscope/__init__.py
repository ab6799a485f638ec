"""gapscope: measure CUDA launch gaps in Nsight Systems traces."""

__version__ = "0.1.0"
