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

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import clang.cindex as ci

from converter.flags import CompileFlags
from converter.parse import ParsedSource, SourceInputError, parse_cuda
from toolchain.files import source_text
from toolchain.stubs import CLANG_BUILTINS, STUB_ROOT, VENDOR_HEADERS

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
    record: Record | None = None  # a struct/class/union pointee or type: its layout, from libclang


@dataclass(frozen=True)
class Record:
    """A struct's name, sizeof and its scalar leaves in order (canonical C spellings: ('float', 'float') for
    `struct { float a, b; }`, arrays unrolled, nested structs flattened); leaves is empty when a leaf is no
    plain scalar (a pointer, a bit-field, a template-dependent member)."""
    name: str
    size: int
    leaves: tuple[str, ...] = ()


@dataclass
class Decl:
    """One top-level declaration of the main file (inside namespaces / extern "C" too)."""
    cursor: ci.Cursor
    qualname: str
    names: set[str]          # identifiers it declares (enumerators included)
    role: str                # kernel | device | type | var | host | always
    start: int               # byte offsets of its extent in the text of `file`
    end: int
    file: str = ""           # the main file or a local header


@dataclass
class SliceResult:
    """The sliced text plus what the slicer removed."""
    text: str
    kernels: list[str]
    dropped_includes: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)   # qualified names of removed declarations
    params: dict[str, list[KernelParam]] = field(default_factory=dict)  # per kernel (qualified name)
    headers: dict[str, str] = field(default_factory=dict)  # local header path -> its sliced text (lines kept)


def device_slice(text: str, filename: str, kernels: list[str] | None = None,
                 include_dirs: list[str] | None = None) -> str:
    """Device code of `text` needed by `kernels` (all __global__ functions when None)."""
    return slice_source(text, filename, kernels, include_dirs).text


def slice_source(text: str, filename: str, kernels: list[str] | None = None,
                 include_dirs: list[str] | None = None, flags: CompileFlags | None = None) -> SliceResult:
    """Slice and report what was dropped; raises SliceError for unknown kernels or undeclared names.

    Local headers (included files under the source's folder or one of the -I folders of `flags`) are sliced
    with the main file: the device code the kernels reach is kept, host code and its unresolved includes are
    dropped; their sliced texts come back in `headers` (see materialize_headers). A -include file is never
    sliced (the source does not name it)."""
    try:
        parsed = parse_cuda(text, filename, include_dirs, flags)
    except SourceInputError as exc:
        raise SliceError(exc.diagnostics) from None
    forced = {os.path.realpath(i) for i in (flags.includes if flags else ())}
    local = [h for h in _local_headers(parsed, filename, list(flags.include_dirs) if flags else [])
             if os.path.realpath(h) not in forced]
    files = _Files(parsed, local)
    decls = _collect(parsed, files)
    roots = _roots(decls, kernels, filename)
    macros = _macro_tokens(parsed, files)
    closures = {d.qualname: _closure(files, d, decls, macros) for d in roots}
    keep_ids = set().union(*closures.values()) if closures else set()
    keep = [d for d in decls if d.role == "always" or id(d) in keep_ids or _is_operator(d)]
    _check_undeclared(parsed, keep, roots, closures)
    raws = {f: bytearray(t.encode()) for f, t in files.texts.items()}
    dropped = [d for d in decls if d not in keep and d.role != "namespace"]
    for d in dropped:
        _blank(raws[d.file], d.start, d.end)
    _blank_instantiations(raws, decls, keep, dropped)
    dropped_includes = _blank_includes(raws, parsed, files)
    dropped_includes += _blank_vendor_includes(raws, parsed, files, keep)
    params = {d.qualname: _params(d.cursor) for d in roots}
    headers = {f: raws[f].decode() for f in files.headers}
    return SliceResult(raws[parsed.filename].decode(), [d.qualname for d in roots], dropped_includes,
                       [d.qualname for d in dropped], params, headers)


def materialize_headers(result: SliceResult, folder: Path) -> str:
    """Write the sliced local headers under `folder` and point every #include of them (in the main text and
    in the headers) at those copies; returns the main text. Includes keep their line, so lines stay true."""
    folder.mkdir(parents=True, exist_ok=True)
    copies = header_copies(result, folder)
    for h, text in result.headers.items():
        _write_if_changed(copies[h], _redirect_includes(text, h, copies))
    return _redirect_includes(result.text, None, copies)


def header_copies(result: SliceResult, folder: Path) -> dict[str, Path]:
    """Where materialize_headers puts each local header's sliced copy (messages map them back to the header)."""
    return {h: folder / f"h{i}_{Path(h).name}" for i, h in enumerate(sorted(result.headers))}


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)


def _redirect_includes(text: str, owner: str | None, copies: dict[str, Path]) -> str:
    """`#include "x.h"` -> `#include "/abs/copy/of/x.h"` for the local headers that have a sliced copy."""
    by_name: dict[str, list[str]] = {}
    for h in copies:
        by_name.setdefault(Path(h).name, []).append(h)

    def repl(m: re.Match) -> str:
        name = m.group(2)
        target = _which(name, owner, by_name.get(Path(name).name, []))
        return m.group(0) if target is None else f'{m.group(1)}"{copies[target]}"'
    return _INCLUDE_LINE.sub(repl, text)


def _which(name: str, owner: str | None, candidates: list[str]) -> str | None:
    """The local header an include spelled `name` resolved to (by path suffix; the includer's folder first)."""
    hits = [c for c in candidates if c.replace(os.sep, "/").endswith("/" + name.lstrip("./")) or Path(c).name == name]
    if owner is not None:
        near = [c for c in hits if Path(c).parent == Path(owner).parent]
        hits = near or hits
    return hits[0] if len(hits) == 1 or hits else None


_INCLUDE_LINE = re.compile(r'^([ \t]*#[ \t]*include[ \t]*)[<"]([^>"\n]+)[>"]', re.M)


def kernel_params(text: str, filename: str, kernel: str, include_dirs: list[str] | None = None) -> list[KernelParam]:
    """Parameters of __global__ `kernel` with canonical types from libclang."""
    try:
        parsed = parse_cuda(text, filename, include_dirs)
    except SourceInputError as exc:
        raise SliceError(exc.diagnostics) from None
    return _params(_roots(_collect(parsed, _Files(parsed, [])), [kernel], filename)[0].cursor)


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
    return KernelParam(arg.spelling, arg.type.spelling, pointer, None if dependent else elem,
                       None if dependent else _record(base))


def _record(t: ci.Type) -> Record | None:
    """The layout of a complete struct/class/union type (None for anything else)."""
    t = t.get_canonical()
    if t.kind != ci.TypeKind.RECORD or t.get_size() <= 0:
        return None
    name = t.get_declaration().spelling or t.spelling
    leaves: list[str] | None = []

    def walk(rt: ci.Type, depth: int) -> None:
        nonlocal leaves
        for fld in rt.get_fields():
            if leaves is None:
                return
            ft = fld.type.get_canonical()
            count = 1
            while ft.kind == ci.TypeKind.CONSTANTARRAY and count < 4096:
                count *= max(ft.element_count, 0)
                ft = ft.element_type.get_canonical()
            if fld.is_bitfield() or count <= 0 or count >= 4096 or depth > 8:
                leaves = None
            elif ft.kind == ci.TypeKind.RECORD:
                for _ in range(count):
                    walk(ft, depth + 1)
            elif ft.kind in (ci.TypeKind.POINTER, ci.TypeKind.UNEXPOSED, ci.TypeKind.DEPENDENT) or ft.get_size() <= 0:
                leaves = None
            else:
                spelled = " ".join(re.sub(r"\b(const|volatile)\b", " ", ft.spelling).split())
                leaves += [spelled] * count
    walk(t, 0)
    return Record(name.removeprefix("struct ").removeprefix("class ").removeprefix("union "), t.get_size(),
                  tuple(leaves or ()))


# ---- collecting declarations -------------------------------------------------------------------------------
class _Files:
    """The files the slicer edits: the main file and its local headers, with their texts and line starts."""

    def __init__(self, parsed: ParsedSource, headers: list[str]):
        self.main = parsed.filename
        self.headers = headers
        self.texts = {self.main: parsed.text}
        for h in headers:
            self.texts[h] = source_text(Path(h).read_bytes())
        self._starts = {f: _line_starts(t) for f, t in self.texts.items()}
        self._main_handle = parsed

    def owner(self, c: ci.Cursor) -> str | None:
        """The edited file a cursor is spelled in, or None."""
        if self._main_handle.is_main(c):
            return self.main
        if not self.headers:
            return None
        f = c.location.file
        return f.name if f is not None and f.name in self.texts else None

    def offset(self, file: str, line: int, col: int) -> int:
        return self._starts[file][line - 1] + col - 1

    def text(self, file: str) -> str:
        return self.texts[file]


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for i, b in enumerate(text.encode()):
        if b == 10:
            starts.append(i + 1)
    return starts


def _local_headers(parsed: ParsedSource, filename: str, local_dirs: list[str]) -> list[str]:
    """Included files that are the project's own headers: under the source's folder or one of `local_dirs`, or
    reached by a quoted #include relative to a local includer (`#include "../UTILS/utils.h"`: a header above the
    source's folder, in the same project), transitively; never a system or stub header."""
    roots = [Path(os.path.abspath(filename)).parent] + [Path(os.path.abspath(d)) for d in local_dirs]
    incs = [inc for inc in parsed.tu.get_includes() if inc.include is not None]
    out: list[str] = []
    grew = True
    while grew:  # a header reached through `../` may include its own neighbours
        grew = False
        for inc in incs:
            f = inc.include
            if f.name in out or f.name == filename:
                continue
            p = Path(os.path.abspath(f.name))
            if not p.is_file():
                continue
            under = any(r == p.parent or r in p.parents for r in roots)
            src = inc.source.name if inc.source is not None else None
            if under or (src is not None and (src == filename or src in out)
                         and _quoted_beside(parsed, src, inc.location.line, p)):
                out.append(f.name)
                grew = True
    return out


def _quoted_beside(parsed: ParsedSource, includer: str, line: int, header: Path) -> bool:
    """Whether line `line` of `includer` is a quoted #include that names `header` relative to the includer's
    folder (how a project reaches its own headers with `../`), and `header` is no system or stub header."""
    if any(d == header.parent or d in header.parents for d in _NOT_LOCAL):
        return False
    try:
        text = parsed.text if includer == parsed.filename else source_text(Path(includer).read_bytes())
    except OSError:
        return False
    lines = text.splitlines()
    m = _INCLUDE_LINE.match(lines[line - 1]) if 0 < line <= len(lines) else None
    if m is None or m.group(0)[len(m.group(1))] != '"':
        return False
    near = Path(os.path.normpath(Path(os.path.abspath(includer)).parent / m.group(2)))
    return near == Path(os.path.normpath(header))


_NOT_LOCAL = [Path(p) for p in ("/usr", "/opt", "/lib")] + [STUB_ROOT.resolve(), CLANG_BUILTINS.resolve()]


def _collect(parsed: ParsedSource, files: _Files) -> list[Decl]:
    out: list[Decl] = []
    _walk(parsed, files, parsed.tu.cursor, "", out)
    return out


def _walk(parsed: ParsedSource, files: _Files, parent: ci.Cursor, prefix: str, out: list[Decl]) -> None:
    for c in parent.get_children():
        if c.kind.is_preprocessing():
            continue
        file = files.owner(c)
        if file is None:
            continue
        if c.kind == CK.NAMESPACE:
            out.append(_decl(files, file, c, prefix, "namespace"))
            _walk(parsed, files, c, f"{prefix}{c.spelling}::", out)
        elif c.kind == CK.LINKAGE_SPEC and _braced(files, file, c):
            _walk(parsed, files, c, prefix, out)
        elif c.kind == CK.LINKAGE_SPEC:
            inner = next(iter(c.get_children()), None)
            if inner is not None:
                d = _decl(files, file, inner, prefix, _role(files, file, inner))
                d.start = files.offset(file, c.extent.start.line, c.extent.start.column)
                out.append(d)
        else:
            out.append(_decl(files, file, c, prefix, _role(files, file, c)))


def _braced(files: _Files, file: str, linkage: ci.Cursor) -> bool:
    """extern "C" { ... } (a block) rather than extern "C" <one declaration>."""
    first = next(iter(linkage.get_children()), None)
    start = files.offset(file, linkage.extent.start.line, linkage.extent.start.column)
    stop = (files.offset(file, first.extent.start.line, first.extent.start.column) if first is not None
            else files.offset(file, linkage.extent.end.line, linkage.extent.end.column))
    return "{" in files.text(file).encode()[start:stop].decode(errors="replace")


def _decl(files: _Files, file: str, c: ci.Cursor, prefix: str, role: str) -> Decl:
    names = {c.spelling} if c.spelling and not c.spelling.startswith("(") else set()
    if c.kind == CK.ENUM_DECL:
        names |= {e.spelling for e in c.get_children() if e.kind == CK.ENUM_CONSTANT_DECL}
    start = files.offset(file, c.extent.start.line, c.extent.start.column)
    end = files.offset(file, c.extent.end.line, c.extent.end.column)
    return Decl(c, prefix + c.spelling, names, role, start, end, file)


def _role(files: _Files, file: str, c: ci.Cursor) -> str:
    """By attributes: __global__ kernel, __device__ function, device/constant/shared or const variable, type.

    A function is device code by its attributes or by being a constexpr function (clang and nvcc's relaxed
    constexpr call those from device code); a `constexpr` inside a host function's body says nothing.
    """
    attrs = {a.kind for a in c.get_children() if a.kind.is_attribute()}
    if c.kind in _FUNCTION_KINDS:
        if CK.CUDAGLOBAL_ATTR in attrs:
            return "kernel"
        if CK.CUDADEVICE_ATTR in attrs or "constexpr" in _head_identifiers(files, file, c):
            return "device"
        return "host"
    if c.kind == CK.VAR_DECL:
        if attrs & _DEVICE_VAR_ATTRS or c.type.is_const_qualified() or "constexpr" in _identifiers(files, file, c):
            return "var"
        return "host"
    if c.kind in _TYPE_KINDS:
        return "type"
    return "always"


def _head_identifiers(files: _Files, file: str, c: ci.Cursor) -> set[str]:
    """Identifiers of a function's declaration before its body."""
    body = next((b for b in c.get_children() if b.kind == CK.COMPOUND_STMT), None)
    if body is None:
        return _identifiers(files, file, c)
    start = files.offset(file, c.extent.start.line, c.extent.start.column)
    end = files.offset(file, body.extent.start.line, body.extent.start.column)
    code = _NOISE.sub(" ", files.text(file).encode()[start:end].decode(errors="replace"))
    return set(_IDENT.findall(code))


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


def _macro_tokens(parsed: ParsedSource, files: _Files) -> dict[str, set[str]]:
    """Identifiers in the body of each #define of the main file and the local headers."""
    out: dict[str, set[str]] = {}
    for c in parsed.tu.cursor.get_children():
        if c.kind == CK.MACRO_DEFINITION:
            file = files.owner(c)
            if file is not None:
                out.setdefault(c.spelling, set()).update(_identifiers(files, file, c) - {c.spelling})
    return out


def _closure(files: _Files, root: Decl, decls: list[Decl], macros: dict[str, set[str]]) -> set[int]:
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
        names = _identifiers(files, d.file, d.cursor)
        while names:
            n = names.pop()
            if n in seen_names:
                continue
            seen_names.add(n)
            names |= macros.get(n, set())
            work.extend(by_name.get(n, []))
    return reached


def _identifiers(files: _Files, file: str, c: ci.Cursor) -> set[str]:
    """Identifiers spelled in the cursor's extent, comments and literals skipped.

    Read from the text: libclang returns no tokens for cursors when the parse uses `-include` (the prelude).
    """
    start = files.offset(file, c.extent.start.line, c.extent.start.column)
    end = files.offset(file, c.extent.end.line, c.extent.end.column)
    code = _NOISE.sub(" ", files.text(file).encode()[start:end].decode(errors="replace"))
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
        owner = next((d for d in keep if d.file == parsed.filename and d.start <= off <= d.end
                      and d.role != "namespace"), None)
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


def _blank_includes(raws: dict[str, bytearray], parsed: ParsedSource, files: _Files) -> list[str]:
    """Blank the #include lines (main file and local headers) of headers that do not resolve; their names."""
    dropped: list[str] = []
    for c in parsed.tu.cursor.get_children():
        if c.kind != CK.INCLUSION_DIRECTIVE:
            continue
        file = files.owner(c)
        if file is None or (c.spelling not in parsed.missing_includes and c.get_included_file() is not None):
            continue
        start = files.offset(file, c.extent.start.line, 1)
        _blank(raws[file], start, files.offset(file, c.extent.end.line, c.extent.end.column))
        dropped.append(c.spelling)
    return dropped


def _blank_vendor_includes(raws: dict[str, bytearray], parsed: ParsedSource, files: _Files,
                           keep: list[Decl]) -> list[str]:
    """Blank the #include lines of vendor libraries (cuBLAS, NCCL, helper_cuda.h...) when the kept device code
    names nothing they declare: the slice then builds where the library is not installed."""
    incs = [c for c in parsed.tu.cursor.get_children()
            if c.kind == CK.INCLUSION_DIRECTIVE and c.spelling in VENDOR_HEADERS and files.owner(c) is not None]
    if not incs:
        return []
    vendor_files = {i.include.name for i in parsed.tu.get_includes()
                    if i.include is not None and any(i.include.name.endswith("/" + v) for v in VENDOR_HEADERS)}
    declared: set[str] = set()
    for c in parsed.tu.cursor.get_children():
        f = c.location.file
        if f is not None and f.name in vendor_files:
            declared.add(c.spelling)
            if c.kind == CK.ENUM_DECL:
                declared |= {e.spelling for e in c.get_children()}
            elif c.kind == CK.TYPEDEF_DECL and c.underlying_typedef_type.get_declaration().kind == CK.ENUM_DECL:
                # `typedef enum {...} cublasStatus_t;`: its constants (a typedef'd struct's member names, such as
                # cublasLtMatmulAlgo_t's `data`, are no names device code can use without naming the type)
                declared |= {e.spelling for e in c.underlying_typedef_type.get_declaration().get_children()}
    used = set().union(*(_identifiers(files, d.file, d.cursor) for d in keep if d.role != "namespace")) \
        if keep else set()
    if used & (declared - {""}):
        return []
    # the vendor headers bring the 16-bit float types with them (cublas_api.h includes cuda_fp16.h/cuda_bf16.h):
    # the first dropped line of each file keeps them
    first: dict[str, ci.Cursor] = {}
    for c in incs:
        first.setdefault(files.owner(c), c)
    for c in sorted(incs, key=lambda c: -c.extent.start.offset):
        file = files.owner(c)
        start = files.offset(file, c.extent.start.line, 1)
        end = files.offset(file, c.extent.end.line, c.extent.end.column)
        _blank(raws[file], start, end)
        if first[file] is c:
            raws[file][start:end] = _FP16_INCLUDE
    return [c.spelling for c in incs]


_FP16_INCLUDE = b"#include <cuda_bf16.h>"


_EXPLICIT_INST = re.compile(rb"(?<![\w:])(?:extern\s+)?template(?!\s*<)\s[^;{}]*;")


def _blank_instantiations(raws: dict[str, bytearray], decls: list[Decl], keep: list[Decl],
                          dropped: list[Decl]) -> None:
    """Blank explicit instantiations (`template void launch<float>(...);`) of templates the slice dropped.

    libclang exposes no cursor for them, so they are found in the text between declarations: the name
    instantiated is the last identifier before the first `<` or `(`.
    """
    gone = {n for d in dropped for n in d.names} - {n for d in keep for n in d.names}
    for file, raw in raws.items():
        spans = [(d.start, d.end) for d in decls if d.file == file and d.role != "namespace"]
        for m in _EXPLICIT_INST.finditer(bytes(raw)):
            if any(a <= m.start() < b for a, b in spans):
                continue
            head = re.split(rb"[<(]", m.group(0), maxsplit=1)[0]
            ids = re.findall(rb"[A-Za-z_]\w*", head)
            if ids and ids[-1].decode() in gone:
                _blank(raw, m.start(), m.end())
