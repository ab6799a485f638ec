"""`gapscope compare`: thresholds (``thresholds``) and the regression verdicts of a baseline
against a current run (``comparison``), computed apart from any rendering."""
