"""C++ spelling of template arguments: the one place Python values become template-argument text."""
from __future__ import annotations

from typing import Any, Iterable


def template_arg_text(value: Any) -> str:
    """One template argument as C++ text (`True` -> 'true', `0.5` -> '0.5f', `16` -> '16', strings as given)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value!r}f"
    return str(value)


def template_args_text(args: Iterable[Any]) -> str:
    """A template argument list without the brackets, as demangle_entry writes it (`[16, True]` -> '16, true')."""
    return ", ".join(template_arg_text(a) for a in args)


def kernel_expr(name: str, args: Iterable[Any]) -> str:
    """The expression that names one instantiation: 'gemm<16, true>', or the bare name without arguments."""
    text = template_args_text(args)
    return f"{name}<{text}>" if text else name
