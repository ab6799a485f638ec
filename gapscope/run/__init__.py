"""`gapscope run`: CuPy micro-kernels and the CUDA Graph cases of docs/cases.md recorded under nsys (``runner``,
``workload``), and the figures that answer each case (``case_figures``)."""
