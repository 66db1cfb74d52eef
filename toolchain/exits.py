"""The exit statuses of every `rtransform` and `rammer` command (README, "Exit codes"): one table, so that a
script can tell a failed check from a mistyped command from a machine that lacks a GPU."""
from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    """What a command's exit status means, the same for both CLIs."""

    OK = 0       # done; a check or verification that ran passed
    FAILED = 1   # the work ran and failed: outputs differ from the truth, a kernel or node was refused, a build or
    #              run stopped with an error
    USAGE = 2    # the command line or an input is wrong: unknown option or name, a missing or unreadable file, a
    #              malformed model or launch spec (click's own usage errors exit 2 as well)
    MISSING = 3  # this machine lacks what the command needs: no GPU for --device gpu / bench / measuring, or an
    #              optional package (torch for `rammer export`)
    LEGACY_ORDER = 4  # `rtransform verify`: the outputs differ only because the legacy kernel's own result is not
    #                   fixed by its inputs (it depends on block order, or varies between runs): nothing to verify
