"""The fault suite's tally: inputs tried, crashes, samples lost — printed at the end of pytest.

Fault tests count what they throw at the code here (``tally.tried(n)``), every unexpected exception
that escaped the code under test (``tally.crashed()``) and every sample or span that went in but
did not come out (``tally.lost(n)``). The tests still assert; the tally is the one-line summary
the README's Reliability section quotes. Registered from ``tests/conftest.py``.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any


class Tally:
    """Thread-safe counters per fault area (``properties``, ``exporter``, ``receiver``, ...)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.inputs: dict[str, int] = defaultdict(int)
        self.crashes: dict[str, int] = defaultdict(int)
        self.samples_lost: dict[str, int] = defaultdict(int)

    def tried(self, area: str, n: int = 1) -> None:
        """Count ``n`` inputs thrown at the code."""
        with self._lock:
            self.inputs[area] += n

    def crashed(self, area: str, n: int = 1) -> None:
        """Count an exception that escaped the code under test."""
        with self._lock:
            self.crashes[area] += n

    def lost(self, area: str, n: int) -> None:
        """Count samples (or spans) that went in and did not come out."""
        if n:
            with self._lock:
                self.samples_lost[area] += n

    def lines(self) -> list[str]:
        """One line per area and a total, ``inputs tried / crashes / samples lost``."""
        areas = sorted(set(self.inputs) | set(self.crashes) | set(self.samples_lost))
        out = []
        for area in areas:
            out.append(
                f"{area:<12} {self.inputs[area]:>8} inputs tried / {self.crashes[area]} crashes"
                f" / {self.samples_lost[area]} samples lost"
            )
        if areas:
            out.append(
                f"{'total':<12} {sum(self.inputs.values()):>8} inputs tried / "
                f"{sum(self.crashes.values())} crashes / {sum(self.samples_lost.values())} "
                "samples lost"
            )
        return out


tally = Tally()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the tally when any fault test ran."""
    lines = tally.lines()
    if not lines:
        return
    terminalreporter.section("otel-trackio fault tally")
    for line in lines:
        terminalreporter.write_line(line)
