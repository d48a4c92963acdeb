"""Shared benchmark helpers: median-of-runs timing and plain-text tables (no dependencies)."""
from __future__ import annotations

import statistics
import time


def median_ms(fn, repeats: int = 5, warmup: int = 1, clock=time.process_time) -> float:
    """Median time of ``fn()`` in milliseconds over ``repeats`` calls, after ``warmup`` calls.

    The default clock is this process's CPU time: on a shared machine it does not count the time other
    processes hold the cores (run every library single-threaded).  Pass ``time.perf_counter`` for wall time.
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return 1e3 * statistics.median(times)


def fmt(value, digits: int = 2) -> str:
    """A number for a table cell ('-' for None)."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return f"{value:.{digits}f}"


def print_table(title: str, headers, rows) -> None:
    """Print a left-aligned text table: first column left, the others right-aligned."""
    cells = [[str(h) for h in headers]] + [[fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    print(f"\n{title}")
    for k, row in enumerate(cells):
        line = "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
        print(line)
        if k == 0:
            print("  ".join("-" * w for w in widths))


def awaited(result):
    """``result``, or what it resolves to when it is a coroutine (EZKL's Python API returns either, by version)."""
    import asyncio

    return asyncio.run(result) if asyncio.iscoroutine(result) else result
