"""Device-code slicing: keep what the named kernels need from a file that also holds host code.

Public API:
    device_slice(text, filename, kernels=None, include_dirs=None) -> str
    slice_source(text, filename, kernels=None, include_dirs=None) -> SliceResult   # text, drops, kernel params
    kernel_params(text, filename, kernel, include_dirs=None) -> list[KernelParam]  # C types of a kernel's params
    SliceError: .diagnostics is a list of "file:line:col: error: msg" strings (str(e) is the first one)

Removed declarations are blanked character by character, so every kept line and column stays where it was.
Kept: preprocessor lines (minus #includes that do not resolve), namespaces, using-directives, static_asserts,
and, when the named kernels reach them by name (macros followed), types, __device__/__global__ functions,
__constant__/__device__ variables and const/constexpr globals; device operator overloads are always kept.
Dropped: host-only functions (main included), host globals, kernels and helpers the named kernels never reach.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import clang.cindex as ci

from converter.parse import ParsedSource, parse_cuda

CK = ci.CursorKind
_FUNCTION_KINDS = {CK.FUNCTION_DECL, CK.FUNCTION_TEMPLATE, CK.CXX_METHOD, CK.CONSTRUCTOR, CK.DESTRUCTOR,
                   CK.CONVERSION_FUNCTION}
_TYPE_KINDS = {CK.STRUCT_DECL, CK.CLASS_DECL, CK.UNION_DECL, CK.ENUM_DECL, CK.TYPEDEF_DECL, CK.TYPE_ALIAS_DECL,
               CK.CLASS_TEMPLATE, CK.CLASS_TEMPLATE_PARTIAL_SPECIALIZATION, CK.TYPE_ALIAS_TEMPLATE_DECL}
_ALWAYS_KINDS = {CK.USING_DIRECTIVE, CK.USING_DECLARATION, CK.NAMESPACE_ALIAS, CK.STATIC_ASSERT}
_DEVICE_VAR_ATTRS = {CK.CUDADEVICE_ATTR, CK.CUDACONSTANT_ATTR, CK.CUDASHARED_ATTR}
_UNDECLARED = re.compile(r"(?:use of undeclared identifier|unknown type name|no template named|"
                         r"use of undeclared label|no member named) '([^']+)'")


_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_IDENT = re.compile(r"\b[A-Za-z_]\w*")


class SliceError(Exception):
    """A kernel that cannot be sliced out; diagnostics are 'file:line:col: error: msg' lines."""

    def __init__(self, diagnostics: list[str]):
        super().__init__(diagnostics[0])
        self.diagnostics = diagnostics


@dataclass
class KernelParam:
    """A kernel parameter: its C type, whether it is a pointer, and its canonical element/scalar type."""
    name: str
    type: str
    pointer: bool
    elem: str | None = None  # canonical pointee (pointer) or type (scalar); None when template-dependent


@dataclass
class Decl:
    """One top-level declaration of the main file (inside namespaces / extern "C" too)."""
    cursor: ci.Cursor
    qualname: str
    names: set[str]          # identifiers it declares (enumerators included)
    role: str                # kernel | device | type | var | host | always
    start: int               # byte offsets of its extent in the text
    end: int


@dataclass
class SliceResult:
    """The sliced text plus what the slicer removed."""
    text: str
    kernels: list[str]
    dropped_includes: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)   # qualified names of removed declarations
    params: dict[str, list[KernelParam]] = field(default_factory=dict)  # per kernel (qualified name)


def device_slice(text: str, filename: str, kernels: list[str] | None = None,
                 include_dirs: list[str] | None = None) -> str:
    """Device code of `text` needed by `kernels` (all __global__ functions when None)."""
    return slice_source(text, filename, kernels, include_dirs).text


def slice_source(text: str, filename: str, kernels: list[str] | None = None,
                 include_dirs: list[str] | None = None) -> SliceResult:
    """Slice and report what was dropped; raises SliceError for unknown kernels or undeclared names."""
    parsed = parse_cuda(text, filename, include_dirs)
    decls = _collect(parsed)
    roots = _roots(decls, kernels, filename)
    macros = _macro_tokens(parsed)
    closures = {d.qualname: _closure(parsed, d, decls, macros) for d in roots}
    keep_ids = set().union(*closures.values()) if closures else set()
    keep = [d for d in decls if d.role == "always" or id(d) in keep_ids or _is_operator(d)]
    _check_undeclared(parsed, keep, roots, closures)
    raw = bytearray(text.encode())
    dropped = [d for d in decls if d not in keep and d.role != "namespace"]
    for d in dropped:
        _blank(raw, d.start, d.end)
    dropped_includes = _blank_includes(raw, parsed)
    params = {d.qualname: _params(d.cursor) for d in roots}
    return SliceResult(raw.decode(), [d.qualname for d in roots], dropped_includes,
                       [d.qualname for d in dropped], params)


def kernel_params(text: str, filename: str, kernel: str, include_dirs: list[str] | None = None) -> list[KernelParam]:
    """Parameters of __global__ `kernel` with canonical types from libclang."""
    parsed = parse_cuda(text, filename, include_dirs)
    return _params(_roots(_collect(parsed), [kernel], filename)[0].cursor)


def _params(kernel: ci.Cursor) -> list[KernelParam]:
    return [_param(a) for a in kernel.get_children() if a.kind == CK.PARM_DECL]


def _param(arg: ci.Cursor) -> KernelParam:
    canon = arg.type.get_canonical()
    pointer = canon.kind in (ci.TypeKind.POINTER, ci.TypeKind.INCOMPLETEARRAY, ci.TypeKind.CONSTANTARRAY)
    base = (canon.get_pointee() if canon.kind == ci.TypeKind.POINTER
            else canon.element_type if pointer else canon)
    elem = re.sub(r"\b(const|volatile|__restrict)\b", " ", base.spelling)
    elem = " ".join(elem.split())
    dependent = "type-parameter" in elem or base.kind == ci.TypeKind.UNEXPOSED
    return KernelParam(arg.spelling, arg.type.spelling, pointer, None if dependent else elem)


# ---- collecting declarations -------------------------------------------------------------------------------
def _collect(parsed: ParsedSource) -> list[Decl]:
    out: list[Decl] = []
    _walk(parsed, parsed.tu.cursor, "", out)
    return out


def _walk(parsed: ParsedSource, parent: ci.Cursor, prefix: str, out: list[Decl]) -> None:
    for c in parent.get_children():
        if not parsed.is_main(c) or c.kind.is_preprocessing():
            continue
        if c.kind == CK.NAMESPACE:
            out.append(_decl(parsed, c, prefix, "namespace"))
            _walk(parsed, c, f"{prefix}{c.spelling}::", out)
        elif c.kind == CK.LINKAGE_SPEC and _braced(parsed, c):
            _walk(parsed, c, prefix, out)
        elif c.kind == CK.LINKAGE_SPEC:
            inner = next(iter(c.get_children()), None)
            if inner is not None:
                d = _decl(parsed, inner, prefix, _role(parsed, inner))
                d.start = parsed.offset(c.extent.start.line, c.extent.start.column)
                out.append(d)
        else:
            out.append(_decl(parsed, c, prefix, _role(parsed, c)))


def _braced(parsed: ParsedSource, linkage: ci.Cursor) -> bool:
    """extern "C" { ... } (a block) rather than extern "C" <one declaration>."""
    first = next(iter(linkage.get_children()), None)
    start = parsed.offset(linkage.extent.start.line, linkage.extent.start.column)
    stop = (parsed.offset(first.extent.start.line, first.extent.start.column) if first is not None
            else parsed.offset(linkage.extent.end.line, linkage.extent.end.column))
    return "{" in parsed.text.encode()[start:stop].decode(errors="replace")


def _decl(parsed: ParsedSource, c: ci.Cursor, prefix: str, role: str) -> Decl:
    names = {c.spelling} if c.spelling and not c.spelling.startswith("(") else set()
    if c.kind == CK.ENUM_DECL:
        names |= {e.spelling for e in c.get_children() if e.kind == CK.ENUM_CONSTANT_DECL}
    start = parsed.offset(c.extent.start.line, c.extent.start.column)
    end = parsed.offset(c.extent.end.line, c.extent.end.column)
    return Decl(c, prefix + c.spelling, names, role, start, end)


def _role(parsed: ParsedSource, c: ci.Cursor) -> str:
    attrs = {a.kind for a in c.get_children() if a.kind.is_attribute()}
    if c.kind in _FUNCTION_KINDS:
        if CK.CUDAGLOBAL_ATTR in attrs:
            return "kernel"
        if CK.CUDADEVICE_ATTR in attrs or "constexpr" in _identifiers(parsed, c):
            return "device"
        return "host"
    if c.kind == CK.VAR_DECL:
        if attrs & _DEVICE_VAR_ATTRS or c.type.is_const_qualified() or "constexpr" in _identifiers(parsed, c):
            return "var"
        return "host"
    if c.kind in _TYPE_KINDS:
        return "type"
    return "always"


def _is_operator(d: Decl) -> bool:
    return d.role == "device" and d.cursor.spelling.startswith("operator")


# ---- reachability by name ----------------------------------------------------------------------------------
def _roots(decls: list[Decl], kernels: list[str] | None, filename: str) -> list[Decl]:
    defined = [d for d in decls if d.role == "kernel"]
    if kernels is None:
        return _unique_by_name(defined)
    roots: list[Decl] = []
    for k in kernels:
        base = k.split("<", 1)[0].strip()
        hits = [d for d in defined if base in (d.qualname, d.cursor.spelling)]
        if not hits:
            known = ", ".join(sorted({d.qualname for d in defined})) or "none"
            raise SliceError([f"{filename}:1:1: error: kernel '{base}' not found (__global__ functions: {known})"])
        roots.append(next((d for d in hits if d.cursor.is_definition()), hits[0]))
    return roots


def _unique_by_name(decls: list[Decl]) -> list[Decl]:
    seen: dict[str, Decl] = {}
    for d in decls:
        if d.qualname not in seen or d.cursor.is_definition():
            seen[d.qualname] = d
    return list(seen.values())


def _macro_tokens(parsed: ParsedSource) -> dict[str, set[str]]:
    """Identifiers in the body of each #define of the main file."""
    out: dict[str, set[str]] = {}
    for c in parsed.tu.cursor.get_children():
        if c.kind == CK.MACRO_DEFINITION and parsed.is_main(c):
            out.setdefault(c.spelling, set()).update(_identifiers(parsed, c) - {c.spelling})
    return out


def _closure(parsed: ParsedSource, root: Decl, decls: list[Decl], macros: dict[str, set[str]]) -> set[int]:
    """ids of the declarations reachable from root through identifiers (and macro bodies)."""
    by_name: dict[str, list[Decl]] = {}
    for d in decls:
        if d.role not in ("host", "always", "namespace"):
            for n in d.names:
                by_name.setdefault(n, []).append(d)
    reached: set[int] = set()
    seen_names: set[str] = set()
    work = [root]
    while work:
        d = work.pop()
        if id(d) in reached:
            continue
        reached.add(id(d))
        names = _identifiers(parsed, d.cursor)
        while names:
            n = names.pop()
            if n in seen_names:
                continue
            seen_names.add(n)
            names |= macros.get(n, set())
            work.extend(by_name.get(n, []))
    return reached


def _identifiers(parsed: ParsedSource, c: ci.Cursor) -> set[str]:
    """Identifiers spelled in the cursor's extent, comments and literals skipped.

    Read from the text: libclang returns no tokens for cursors when the parse uses `-include` (the prelude).
    """
    start = parsed.offset(c.extent.start.line, c.extent.start.column)
    end = parsed.offset(c.extent.end.line, c.extent.end.column)
    code = _NOISE.sub(" ", parsed.text.encode()[start:end].decode(errors="replace"))
    return set(_IDENT.findall(code))


# ---- errors and text editing -------------------------------------------------------------------------------
def _check_undeclared(parsed: ParsedSource, keep: list[Decl], roots: list[Decl],
                      closures: dict[str, set[int]]) -> None:
    """Fail on names the kept code uses but nothing declares (usually from a dropped header)."""
    errors: list[str] = []
    for diag in parsed.errors():
        m = _UNDECLARED.search(diag.spelling)
        if not m:
            continue
        off = parsed.offset(diag.location.line, diag.location.column)
        owner = next((d for d in keep if d.start <= off <= d.end and d.role != "namespace"), None)
        if owner is None:
            continue
        kernel = next((r.qualname for r in roots if id(owner) in closures[r.qualname]), owner.qualname)
        errors.append(f"{parsed.filename}:{diag.location.line}:{diag.location.column}: error: '{m.group(1)}' is "
                      f"not declared (needed by kernel {kernel}); {_missing_hint(parsed.missing_includes)}")
    if errors:
        raise SliceError(errors)


def _missing_hint(missing: list[str]) -> str:
    if not missing:
        return "no header was dropped: misspelled, or declared in a header not included?"
    return "missing header " + " or ".join(f"'{m}'" for m in missing) + "?"


def _blank(raw: bytearray, start: int, end: int) -> None:
    for i in range(start, min(end, len(raw))):
        if raw[i] not in (10, 13):
            raw[i] = 32


def _blank_includes(raw: bytearray, parsed: ParsedSource) -> list[str]:
    """Blank the #include lines of headers that do not resolve; returns their names."""
    dropped: list[str] = []
    for c in parsed.tu.cursor.get_children():
        if c.kind == CK.INCLUSION_DIRECTIVE and parsed.is_main(c) and c.spelling in parsed.missing_includes:
            start = parsed.offset(c.extent.start.line, 1)
            _blank(raw, start, parsed.offset(c.extent.end.line, c.extent.end.column))
            dropped.append(c.spelling)
    return dropped
