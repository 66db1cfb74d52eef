"""The environment variables that set the emulator's watchdogs and what their values may be (light: the CLIs read
and check them at start-up without loading the emulator)."""
from __future__ import annotations

import math
YIELD_BUDGET_ENV = "RAMMER_EMU_YIELD_BUDGET"    # overrides the default budgets (the CLIs' --yield-budget sets it)
STALL_TIMEOUT_ENV = "RAMMER_EMU_STALL_TIMEOUT"  # seconds; 0 turns the stall watchdog off (--stall-timeout)
PCH_ENV = "RAMMER_EMU_PCH"   # 0: build every module without the precompiled emulator header (cuda_emu/pch.py)
MAX_YIELD_BUDGET = 2**62          # fits the launch's signed 64-bit counter
STALL_TICK_S = 0.25               # the stall watchdog's resolution (kStallTickMs in emu_guard.h)
MAX_STALL_TIMEOUT = 7 * 24 * 3600.0


class LimitError(ValueError):
    """A watchdog setting that is not one; str() is the one line to print."""


def check_yield_budget(value: object, where: str) -> int:
    """A yield budget: a whole number in [1, 2^62]; LimitError (one line naming `where`) otherwise."""
    try:
        num = float(value) if isinstance(value, str) else float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        num = math.nan
    if not math.isfinite(num) or num != int(num):
        raise LimitError(f"{where}={value!r} is not a whole number of yields")
    if not 1 <= num <= MAX_YIELD_BUDGET:
        raise LimitError(f"{where} must be in [1, 2^62], got {value}")
    return int(value) if isinstance(value, int) else int(num)


def check_stall_timeout(value: object, where: str) -> float:
    """A stall timeout in seconds: 0 (the watchdog off, said so) or a finite number from the watchdog's 0.25 s
    resolution up to a week; never a value that would round to "off" silently."""
    try:
        secs = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise LimitError(f"{where}={value!r} is not a number of seconds") from None
    if not math.isfinite(secs) or secs < 0:
        raise LimitError(f"{where} must be a finite number of seconds >= 0, got {value}")
    if 0 < secs < STALL_TICK_S:
        raise LimitError(f"{where}={value}: below the stall watchdog's resolution of {STALL_TICK_S} s; give at "
                         f"least {STALL_TICK_S} (or 0 to turn the watchdog off)")
    if secs > MAX_STALL_TIMEOUT:
        raise LimitError(f"{where}={value}: more than a week; give 0 to turn the watchdog off")
    return secs
