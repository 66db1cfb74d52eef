"""Command-line options every tool that runs the emulator shares: its budgets and its sanitizers."""
from __future__ import annotations

import functools
import os
from typing import Any, Callable

import click

from .env import (MAX_YIELD_BUDGET, STALL_TICK_S, STALL_TIMEOUT_ENV, YIELD_BUDGET_ENV, LimitError,
                  check_stall_timeout)

SANITIZE_CHOICES = click.Choice(["memcheck", "racecheck", "synccheck", "all", "none"])
SANITIZE_HELP = ("the CPU emulator's sanitizers (repeatable): memcheck (out-of-bounds global and shared accesses), "
                 "racecheck (shared-memory races), synccheck (divergent barriers and warp masks), all, none")


def emulator_limits(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Adds --yield-budget and --stall-timeout; when given they are exported as $RAMMER_EMU_YIELD_BUDGET /
    $RAMMER_EMU_STALL_TIMEOUT, which every emulator launch of the command (and its workers) obeys."""
    @click.option("--yield-budget", type=click.IntRange(min=1, max=MAX_YIELD_BUDGET), default=None, metavar="N",
                  help=f"emulator watchdog: yields (polls) one launch may make before it is declared stuck "
                       f"[env {YIELD_BUDGET_ENV}]")
    @click.option("--stall-timeout", type=float, default=None, metavar="S",
                  help=f"emulator watchdog: seconds one thread may run without a yield point (at least "
                       f"{STALL_TICK_S}), 0 = off [env {STALL_TIMEOUT_ENV}]")
    @functools.wraps(fn)
    def wrapper(*args: Any, yield_budget: int | None, stall_timeout: float | None, **kwargs: Any) -> Any:
        if yield_budget is not None:
            os.environ[YIELD_BUDGET_ENV] = str(yield_budget)
        if stall_timeout is not None:
            try:
                check_stall_timeout(stall_timeout, "--stall-timeout")
            except LimitError as exc:
                raise click.UsageError(str(exc)) from None
            os.environ[STALL_TIMEOUT_ENV] = repr(stall_timeout)
        return fn(*args, **kwargs)
    return wrapper


def sanitize_option(default: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Adds a repeatable --sanitize; the command receives `sanitize` as the tuple of sanitizer names."""
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        @click.option("--sanitize", "sanitize", multiple=True, type=SANITIZE_CHOICES,
                      help=f"{SANITIZE_HELP} [default: {default}]")
        @functools.wraps(fn)
        def wrapper(*args: Any, sanitize: tuple[str, ...], **kwargs: Any) -> Any:
            from .module import sanitizer_set  # the emulator loads only when a command runs
            return fn(*args, sanitize=sanitizer_set(sanitize or default), **kwargs)
        return wrapper
    return deco
