"""C++ spelling of template arguments: the one place Python values become template-argument text."""
from __future__ import annotations

from typing import Any, Iterable, Union

TemplateArg = Union[bool, int, float, str]  # a template argument's value: a number, a bool, or C++ text (a type)


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


def closing_bracket(text: str, i: int, open_: str = "(", close: str = ")") -> int:
    """Index just past the bracket closing the one at i (or -1)."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    return -1


def split_top_level(text: str) -> list[str]:
    """The comma-separated items of C++ text at bracket depth 0, stripped, empty ones dropped: commas inside (),
    [], {}, template brackets and string or character literals do not split. `name<` opens a template bracket
    when a `>` at the same depth closes it (a `>>` closes two); `a < b`, `<<`, `<=`, `>=` and `->` are operators."""
    angles = _template_brackets(text)
    items, depth, start = [], 0, 0
    for i, ch in _code_chars(text):
        if ch in "([{" or (ch == "<" and i in angles):
            depth += 1
        elif ch in ")]}" or (ch == ">" and i in angles):
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _template_brackets(text: str) -> set[int]:
    """Offsets of the `<` and `>` that pair as template brackets: a `<` right after a name, closed by a `>` before
    the bracket around it closes (an unclosed one was a less-than)."""
    stack: list[tuple[str, int]] = []
    pairs: set[int] = set()
    skip = -1
    for i, ch in _code_chars(text):
        if i <= skip:
            continue
        if ch in "([{":
            stack.append((ch, i))
        elif ch in ")]}":
            while stack and stack[-1][0] == "<":
                stack.pop()
            if stack:
                stack.pop()
        elif ch == "<" and text.startswith(("<<", "<="), i):
            skip = i + 1
        elif ch == "<" and i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"):
            stack.append(("<", i))
        elif ch == ">" and stack and stack[-1][0] == "<" and text[i - 1] != "-" and not text.startswith(">=", i):
            pairs |= {stack.pop()[1], i}
    return pairs


def _code_chars(text: str) -> Iterable[tuple[int, str]]:
    """(offset, char) of the text outside string and character literals (a digit separator `1'000` is no quote)."""
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"' or (ch == "'" and not (i > 0 and text[i - 1].isalnum())):
            j = i + 1
            while j < n and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        yield i, ch
        i += 1
