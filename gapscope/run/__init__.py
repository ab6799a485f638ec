"""`gapscope run`: CuPy micro-kernels and the design text's cases recorded under nsys (``runner``,
``workload``), and the figures that answer each case (``case_figures``)."""
