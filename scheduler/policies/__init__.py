"""Scheduling policies, each a small module against the same mechanism: name -> plan(workload, profiler, ...)."""
from __future__ import annotations

from typing import Callable

from . import ios, sequential, wavefront

POLICIES: dict[str, Callable] = {wavefront.NAME: wavefront.plan, ios.NAME: ios.plan, sequential.NAME: sequential.plan}
