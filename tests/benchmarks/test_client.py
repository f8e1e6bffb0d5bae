"""benchmarks.client's meters: the garbage collector's clock."""

from __future__ import annotations

import gc

from benchmarks.client import GcClock


def test_the_gc_clock_counts_the_passes_it_sees_and_only_those():
    gc.collect()
    with GcClock() as clock:
        gc.collect(0)
        gc.collect()  # a full pass
        gc.collect()
    assert clock.full_passes == 2
    assert clock.seconds > 0
    seen = clock.seconds
    gc.collect()  # after the block: not counted
    assert clock.full_passes == 2 and clock.seconds == seen
    assert clock._on not in gc.callbacks
