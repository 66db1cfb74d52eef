"""JSON text of the build's large files (programs.json, plan.json, timeline.json: millions of wait targets for a
full-size model) through orjson, several times faster than the standard library's encoder on nested lists of ints;
the standard library's where orjson is not installed (the same JSON, spaced differently)."""
from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a listed dependency
    orjson = None  # type: ignore[assignment]


def dumps(obj: Any) -> str:
    """Compact JSON of dicts, lists, tuples, strings, numbers (numpy scalars and arrays included), None."""
    if orjson is None:
        return json.dumps(obj, default=_plain)
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as Python numbers and lists (the standard library's fallback)."""
    return value.tolist() if hasattr(value, "tolist") else str(value)
