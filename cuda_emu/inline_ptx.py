"""Inline PTX the CPU emulator runs: `asm volatile("...")` statements whose instructions are in a small table
(cp.async with its groups, ldmatrix, mma.sync m16n8k8 tf32 / m16n8k16 bf16 and f16, mov of %laneid, the
%lanemask_* registers and the clocks, bar.sync 0) are rewritten,
after preprocessing (macros expanded), into calls of the emu::ptx models (cuda_emu/include/emu_mma.h); any other
asm is left alone (the host's assembler then rejects it, reported as one line by module.py)."""
from __future__ import annotations

import re

_ASM = re.compile(r"\b(?:asm|__asm__|__asm)\s*(?:volatile\b|__volatile__\b)?\s*\(")
_P = "::emu::ptx::"


def _scan_parens(text: str, i: int) -> int:
    """Index after the ')' matching the '(' at i, skipping string and character literals; -1 if unbalanced."""
    depth, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def _sections(body: str) -> list[str]:
    """The asm's template, outputs, inputs, clobbers: split at the ':' outside parentheses and literals."""
    out, depth, cur, i = [], 0, [], 0
    while i < len(body):
        c = body[i]
        if c in "\"'":
            j = i + 1
            while j < len(body) and body[j] != c:
                j += 2 if body[j] == "\\" else 1
            cur.append(body[i:j + 1])
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == ":" and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    return out + ["".join(cur)]


def _template(section: str) -> str | None:
    """The concatenated string literals of the template (escapes \\n and \\t read), None when it is not only those."""
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', section)
    if not parts or re.sub(r'"((?:[^"\\]|\\.)*)"', "", section).strip():
        return None
    return "".join(parts).replace("\\n", "\n").replace("\\t", "\t").replace('\\"', '"').replace("%%", "%")


def _operands(section: str) -> list[tuple[str, str]] | None:
    """(constraint, expression) of each `"=r"(x)` of an operand list."""
    out = []
    s = section.strip()
    while s:
        m = re.match(r'"([^"]*)"\s*\(', s)
        if not m:
            return None
        end = _scan_parens(s, m.end() - 1)
        if end < 0:
            return None
        out.append((m.group(1), s[m.end():end - 1].strip()))
        s = s[end:].lstrip()
        if s.startswith(","):
            s = s[1:].lstrip()
    return out


def _args(text: str) -> list[str]:
    """An instruction's operands, split at the commas outside braces and brackets."""
    out, depth, cur = [], 0, []
    for c in text:
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    return out + (["".join(cur).strip()] if "".join(cur).strip() else [])


def _instruction(instr: str, ops: list[tuple[str, str]]) -> str | None:
    """C++ for one PTX instruction of the table, its %k operands replaced by the asm's expressions; None if not in
    the table."""
    def val(a: str) -> str | None:
        a = a.strip()
        m = re.fullmatch(r"%(\d+)", a)
        if m:
            k = int(m.group(1))
            return f"({ops[k][1]})" if k < len(ops) else None
        return a if re.fullmatch(r"-?(?:0[xX][0-9a-fA-F]+|\d+)[uU]?", a) else None

    def vec(a: str) -> list[str] | None:
        a = a.strip()
        if not (a.startswith("{") and a.endswith("}")):
            return None
        vs = [val(x) for x in a[1:-1].split(",")]
        return None if any(v is None for v in vs) else vs  # type: ignore[return-value]

    def addr(a: str) -> str | None:
        a = a.strip()
        return val(a[1:-1]) if a.startswith("[") and a.endswith("]") else None

    m = re.fullmatch(r"([\w.:]+)\s*(.*)", instr.strip(), re.S)
    if not m:
        return None
    op, args = m.group(1), _args(m.group(2))
    if op == "cp.async.commit_group" and not args:
        return f"{_P}cp_async_commit()"
    if op == "cp.async.wait_all" and not args:
        return f"({_P}cp_async_commit(), {_P}cp_async_wait(0u))"
    if op == "cp.async.wait_group" and len(args) == 1 and val(args[0]):
        return f"{_P}cp_async_wait((unsigned)({val(args[0])}))"
    if re.fullmatch(r"cp\.async\.(?:ca|cg)\.shared(?:::cta)?\.global(?:\.L2::\d+B)?", op) and len(args) in (3, 4):
        dst, src, size = addr(args[0]), addr(args[1]), val(args[2])
        valid = val(args[3]) if len(args) == 4 else size
        if dst and src and size and valid:
            return (f"{_P}cp_async({_P}shared_at((unsigned long long)({dst})), (const void*)(uintptr_t)({src}), "
                    f"(unsigned)({size}), (unsigned)({valid}))")
        return None
    lm = re.fullmatch(r"ldmatrix\.sync\.aligned(?:\.m8n8)?\.x([124])(\.trans)?(?:\.m8n8)?\.shared(?:::cta)?\.b16", op)
    if lm and len(args) == 2:
        n, regs, a = int(lm.group(1)), vec(args[0]), addr(args[1])
        if regs is None or a is None or len(regs) != n:
            return None
        fn = "ldmatrix_trans" if lm.group(2) else "ldmatrix"
        sets = " ".join(f"{r} = __emu_r[{i}];" for i, r in enumerate(regs))
        return f"{{ unsigned __emu_r[4]; {_P}{fn}(__emu_r, {n}, {_P}shared_at((unsigned long long)({a}))); {sets} }}"
    mm = re.fullmatch(r"mma\.sync\.aligned\.(m16n8k8|m16n8k16)\.row\.col\.(f32|f16)\.(tf32|bf16|f16)\.\3\."
                      r"(f32|f16)", op)
    if mm and len(args) == 4:
        shape, dt, ab, ct = mm.groups()
        d, a, b, c = (vec(x) for x in args)
        if d is None or a is None or b is None or c is None or dt != ct or len(a) != 4 or len(b) != 2:
            return None
        if (shape == "m16n8k8") != (ab == "tf32"):
            return None
        if dt == "f32":
            if len(d) != 4 or len(c) != 4:
                return None
            fn = {"tf32": "mma_m16n8k8_tf32", "bf16": "mma_m16n8k16_bf16", "f16": "mma_m16n8k16_f16"}[ab]
            kind, width = "float", 4
        else:
            if ab != "f16" or len(d) != 2 or len(c) != 2:
                return None
            fn, kind, width = "mma_m16n8k16_f16_f16", "unsigned", 2
        sets = " ".join(f"{r} = __emu_d[{i}];" for i, r in enumerate(d))
        return (f"{{ {kind} __emu_d[{width}], __emu_c[{width}] = {{{', '.join(c)}}}; unsigned __emu_a[4] = "
                f"{{{', '.join(a)}}}, __emu_b[2] = {{{', '.join(b)}}}; {_P}{fn}(__emu_d, __emu_a, __emu_b, __emu_c); "
                f"{sets} }}")
    if op in ("mov.u32", "mov.b32", "mov.u64", "mov.b64") and len(args) == 2 and args[1] in _SPECIAL and val(args[0]):
        return f"{val(args[0])} = {_SPECIAL[args[1]]}"
    if op in ("bar.sync", "barrier.sync", "bar.sync.aligned", "barrier.sync.aligned") and args == ["0"]:
        return "__syncthreads()"  # barrier 0 over the whole block: what __syncthreads() compiles to
    return None


# special registers a `mov` reads: the lane masks from the thread's lane, the clocks from the emulator's clock64()
_SPECIAL = {"%laneid": f"{_P}lane()",
            "%lanemask_eq": f"(1u << {_P}lane())",
            "%lanemask_lt": f"((1u << {_P}lane()) - 1u)",
            "%lanemask_le": f"((2u << {_P}lane()) - 1u)",
            "%lanemask_gt": f"(~((2u << {_P}lane()) - 1u))",
            "%lanemask_ge": f"(~((1u << {_P}lane()) - 1u))",
            "%clock": "(unsigned)clock64()", "%clock64": "clock64()", "%globaltimer": "clock64()"}


def rewrite_inline_ptx(text: str) -> str:
    """Every asm statement whose instructions are all in the table, replaced by their emu::ptx calls (one
    statement: `{ ...; }` where the asm was); the others unchanged."""
    out, pos = [], 0
    for m in _ASM.finditer(text):
        if m.start() < pos:
            continue
        end = _scan_parens(text, m.end() - 1)
        if end < 0:
            continue
        secs = _sections(text[m.end():end - 1])
        tmpl = _template(secs[0])
        ops: list[tuple[str, str]] = []
        for sec in secs[1:3]:
            got = _operands(sec)
            if got is None:
                tmpl = None
                break
            ops += got
        if tmpl is None:
            continue
        instrs = [i.strip() for i in re.split(r"[;\n]", tmpl) if i.strip()]
        code = [_instruction(i, ops) for i in instrs]
        if not instrs or any(c is None for c in code):
            continue
        out.append(text[pos:m.start()])
        out.append("(" + ", ".join(f"[&]() {{ {c}; }}()" if c.startswith("{") else f"(void)({c})"
                                   for c in code if c) + ")")  # type: ignore[union-attr]
        pos = end
    return "".join(out) + text[pos:]
