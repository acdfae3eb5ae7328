"""The load harness: seeded phases of 50-500 ms, bounded, on this process's CPUs, and it does slow a measurement."""

from __future__ import annotations

import itertools
import time

import pytest

from nni_hwaware.errors import HwAwareError
from nni_hwaware.profiling.load import BackgroundLoad, load_phases


def test_phases_are_seeded_alternate_and_last_50_to_500_ms() -> None:
    phases = load_phases(3, 60.0)
    assert phases == load_phases(3, 60.0) and phases != load_phases(4, 60.0)
    assert all(0.05 <= length <= 0.5 for _, length in phases)
    assert all(a[0] != b[0] for a, b in itertools.pairwise(phases))  # busy, idle, busy, ...
    assert sum(length for _, length in phases) >= 60.0


def test_bad_options_are_one_line_errors() -> None:
    with pytest.raises(HwAwareError, match="seconds must be > 0"):
        BackgroundLoad(seconds=0)
    with pytest.raises(HwAwareError, match="at least 1 worker"):
        BackgroundLoad(workers=0)


@pytest.mark.slow
def test_the_load_busies_this_process_cpus_and_ends_by_itself() -> None:
    import psutil

    with BackgroundLoad(seed=0, seconds=30) as load:
        workers = [psutil.Process(pid) for pid in load.pids]
        assert load.running and len(workers) == 2 * len(BackgroundLoad.cpus() or [1])
        assert all(set(w.cpu_affinity()) == set(BackgroundLoad.cpus() or w.cpu_affinity()) for w in workers)
        time.sleep(3.0)
        busy = sum(w.cpu_times().user + w.cpu_times().system for w in workers)
    assert not load.running
    # about half of each worker's phases are busy; on a crowded machine each gets less than a core
    assert busy > 0.5, busy

    short = BackgroundLoad(seed=1, seconds=0.5).start()
    time.sleep(2.0)
    assert not short.running  # bounded: it stopped by itself
    short.stop()


def test_run_under_load_records_the_load_and_stops_it() -> None:
    from nni_hwaware.profiling.load import BackgroundLoad, run_under_load

    seen = {}

    def run() -> dict:
        seen["cpus"] = BackgroundLoad.cpus()
        return {"figure": 1.0}

    result = run_under_load(run, enabled=True, seed=3, seconds=5.0)
    expected = 2 * (len(seen["cpus"]) if seen["cpus"] else 1)
    assert result["figure"] == 1.0 and result["load"] == {"seed": 3, "seconds": 5.0, "workers": expected}
    assert result["wall_s"] >= 0
    assert run_under_load(run, enabled=False)["load"] is None
