"""Several traces at once: per-file analysis on an executor (``ranks``, ``executors``), merged
across ranks (``merge``) into one ``FleetResult`` (``result``, schema ``gapscope.fleet/2``)."""
