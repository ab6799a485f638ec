"""Launch overhead per launch API: host cost of the call, launch-to-start latency, rate.

A launch call is a CUDA runtime/driver call that launched GPU work (a kernel, a copy or a
whole graph: ``cudaGraphLaunch``). Names are shown without nsys's ``_vNNNN`` suffix.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gapscope.analysis.intervals import grouped_quantiles


#: Activities whose launches are read at a time.
LINK_BLOCK = 1 << 18


def launch_stats(
    launch: np.ndarray, act_start: np.ndarray, api_start: np.ndarray, api_end: np.ndarray,
    name_codes: np.ndarray, name_table: np.ndarray, stall_threshold_ns: int,
) -> list[dict]:
    """One row per launch API name, most frequent first.

    ``host_*``: duration of the call on the CPU (``host_mean_ns``: the mean of the calls shorter
    than ``stall_threshold_ns``, the host's steady cost per call; a longer call is a stall);
    ``latency_*``: start of the call's first GPU activity minus the call's end (queueing and
    launch latency); ``per_second``: calls divided by the time from the first call's start to
    the last call's end.
    """
    if not (launch >= 0).any():
        return []
    # Each call's first activity start, a block of activities at a time (the temporaries stay
    # small beside the analysis running on other threads).
    first_start = np.full(api_start.size, np.iinfo(np.int64).max, dtype=np.int64)
    for a in range(0, launch.size, LINK_BLOCK):
        lk = launch[a:a + LINK_BLOCK]
        linked = lk >= 0
        np.minimum.at(first_start, lk[linked], act_start[a:a + LINK_BLOCK][linked])
    call_ids = np.flatnonzero(first_start < np.iinfo(np.int64).max)
    # Calls -> their name's code -> the suffix-stripped name (two ids can share one name).
    id_codes, ids = pd.factorize(name_codes[call_ids])
    label_codes, name_uniques = pd.factorize(name_table[ids])
    name_codes = label_codes[id_codes]
    n = len(name_uniques)
    # Latency can be negative only through clock skew; quantiles need non-negative values.
    latency = first_start[call_ids]
    del first_start
    latency -= api_end[call_ids]
    lq = grouped_quantiles(name_codes, np.maximum(latency, 0, out=latency), n, (0.5, 0.9))
    del latency
    host = api_end[call_ids]
    host -= api_start[call_ids]
    hq = grouped_quantiles(name_codes, np.maximum(host, 0, out=host), n, (0.5, 0.9))
    steady = host < stall_threshold_ns
    steady_calls = np.bincount(name_codes[steady], minlength=n)
    steady_sum = np.bincount(name_codes[steady], weights=host[steady], minlength=n)
    del host, steady
    count = np.bincount(name_codes, minlength=n)
    t0 = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(t0, name_codes, api_start[call_ids])
    t1 = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(t1, name_codes, api_end[call_ids])
    window = np.maximum(t1 - t0, 1)
    rows = [
        {
            "api": str(name_uniques[i]),
            "calls": int(count[i]),
            "host_median_ns": float(hq[i, 0]),
            "host_p90_ns": float(hq[i, 1]),
            "host_mean_ns": float(steady_sum[i] / steady_calls[i]) if steady_calls[i] else None,
            "latency_median_ns": float(lq[i, 0]),
            "latency_p90_ns": float(lq[i, 1]),
            "per_second": float(count[i] / window[i] * 1e9),
        }
        for i in range(n)
    ]
    return sorted(rows, key=lambda r: -r["calls"])
