"""The resource governor: CPU and memory thresholds with hysteresis, idle threads -> "take work?"."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import psutil

from django_iq.conf import iq_settings
from django_iq.logs import get_logger

logger = get_logger(__name__)


class ResourceReader(Protocol):
    """Where readings come from: psutil in production, a stub in tests."""

    def cpu_percent(self) -> float: ...

    def memory_percent(self) -> float: ...


class PsutilReader:
    """System-wide CPU and memory use in percent, read through psutil.

    ``psutil.cpu_percent(None)`` measures since its previous call; called on every scheduling
    pass, milliseconds apart, it would swing between 0 and 100 on a small machine. Readings are
    therefore taken at most once per ``sample_seconds`` and reused in between, so each CPU
    figure covers a window long enough to mean something.
    """

    def __init__(
        self, sample_seconds: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.sample_seconds = sample_seconds
        self.clock = clock
        # The first cpu_percent(None) call only starts the measuring window.
        psutil.cpu_percent(interval=None)
        self._sampled_at = clock()
        self._cpu = 0.0
        self._memory = float(psutil.virtual_memory().percent)

    def _sample(self) -> None:
        now = self.clock()
        if now - self._sampled_at >= self.sample_seconds:
            self._cpu = float(psutil.cpu_percent(interval=None))
            self._memory = float(psutil.virtual_memory().percent)
            self._sampled_at = now

    def cpu_percent(self) -> float:
        self._sample()
        return self._cpu

    def memory_percent(self) -> float:
        self._sample()
        return self._memory


class _Unset:
    """The type of ``UNSET``: a governor level not given, taken from the settings."""


UNSET = _Unset()


def _level(given: Any, setting: Any) -> Any:
    return setting if isinstance(given, _Unset) else given


@dataclass(frozen=True)
class Decision:
    """The governor's answer: how many entries to claim now, and why."""

    slots: int
    is_throttled: bool
    cpu_percent: float
    memory_percent: float
    reason: str


class ResourceGovernor:
    """Decide whether this node takes work.

    Above a throttle level (CPU or memory) the node stops claiming and stays stopped until both
    readings fall below their resume levels; in between it keeps its previous state, so a reading
    hovering at the threshold does not flap.
    """

    def __init__(
        self,
        reader: ResourceReader | None = None,
        *,
        cpu_throttle_percent: float | _Unset | None = UNSET,
        cpu_resume_percent: float | _Unset = UNSET,
        memory_throttle_percent: float | _Unset = UNSET,
        memory_resume_percent: float | _Unset = UNSET,
    ) -> None:
        """Levels left out come from the settings. A CPU throttle level of None switches the
        CPU rule off (the default: on a shared host, other programs' load would stall all
        work); memory has no such switch."""
        self.reader = reader or PsutilReader(iq_settings.GOVERNOR_SAMPLE_SECONDS)
        self.cpu_throttle: float | None = _level(
            cpu_throttle_percent, iq_settings.CPU_THROTTLE_PERCENT
        )
        self.cpu_resume = float(_level(cpu_resume_percent, iq_settings.CPU_RESUME_PERCENT))
        self.memory_throttle = float(
            _level(memory_throttle_percent, iq_settings.MEMORY_THROTTLE_PERCENT)
        )
        self.memory_resume = float(_level(memory_resume_percent, iq_settings.MEMORY_RESUME_PERCENT))
        self.is_throttled = False
        self.last = Decision(0, False, 0.0, 0.0, "not asked yet")

    def decide(self, idle_threads: int) -> Decision:
        """Return how many entries may be claimed for ``idle_threads`` idle processing threads."""
        cpu = self.reader.cpu_percent()
        memory = self.reader.memory_percent()
        was_throttled = self.is_throttled
        cpu_high = self.cpu_throttle is not None and cpu >= self.cpu_throttle
        cpu_low = self.cpu_throttle is None or cpu < self.cpu_resume
        if cpu_high or memory >= self.memory_throttle:
            self.is_throttled = True
        elif cpu_low and memory < self.memory_resume:
            self.is_throttled = False
        if self.is_throttled:
            reason = f"throttled cpu={cpu:.0f}% memory={memory:.0f}%"
            if not was_throttled:
                logger.warning(
                    "throttled: not claiming until %smemory < %.0f%% "
                    "cpu=%.0f memory=%.0f cpu_limit=%s memory_limit=%.0f",
                    "" if self.cpu_throttle is None else f"cpu < {self.cpu_resume:.0f}% and ",
                    self.memory_resume,
                    cpu,
                    memory,
                    "off" if self.cpu_throttle is None else f"{self.cpu_throttle:.0f}",
                    self.memory_throttle,
                )
            self.last = Decision(0, True, cpu, memory, reason)
        else:
            if was_throttled:
                logger.warning("resumed claiming cpu=%.0f memory=%.0f", cpu, memory)
            slots = max(0, idle_threads)
            reason = "ok" if slots else "no idle processing thread"
            self.last = Decision(slots, False, cpu, memory, reason)
        return self.last
