"""Rewrite legacy __global__ kernels into rKernels: a list of edits on source ranges, the rest untouched."""
from __future__ import annotations

import bisect
import dataclasses
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from dataclasses import dataclass, field

import clang.cindex as ci

from .output import BarrierSite, Param, RKernelMeta, SharedVariable, SourceLocation, TemplateParam
from .flags import CompileFlags
from .parse import ParsedSource, SourceInputError, line_col, line_starts, parse_cuda
from toolchain.cxx import split_top_level
from toolchain.files import source_text

K = ci.CursorKind
CONVERTER_VERSION = "2"
GRID_SYNC = "grid-wide synchronisation"  # the refusal of grid_group / this_grid (reported once per line)
INDEX_VARS = {"threadIdx", "blockIdx", "blockDim", "gridDim"}
BARRIERS = {"__syncthreads": "rt::sync", "__syncthreads_count": "rt::sync_count",
            "__syncthreads_and": "rt::sync_and", "__syncthreads_or": "rt::sync_or"}
WARP_MASKED = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
               "__all_sync", "__any_sync", "__uni_sync", "__match_any_sync", "__match_all_sync",
               "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync", "__reduce_and_sync",
               "__reduce_or_sync", "__reduce_xor_sync", "__syncwarp"}
CG_CALLS = {"this_thread_block": "rt::this_task", "tiled_partition": "rt::tiled_partition",
            "sync": "rt::sync", "reduce": "rt::reduce", "inclusive_scan": "rt::inclusive_scan",
            "exclusive_scan": "rt::exclusive_scan"}
CG_TYPES = {"thread_block": "rt::TaskGroup", "thread_block_tile": "rt::Tile"}
GROUP_PARAM = "__RtG"  # a `thread_group` parameter: the clone's template parameter (rt::TaskGroup or rt::Tile)
# cooperative_groups types valid inside an rTask as they are (no rt:: counterpart needed)
CG_NATIVE = {"coalesced_group", "plus", "less", "greater", "bit_and", "bit_or", "bit_xor"}
TEXTURE_CALLS = {"tex1Dfetch", "tex1D", "tex2D", "tex3D", "tex1DLayered", "tex2DLayered", "texCubemap",
                 "surf1Dread", "surf2Dread", "surf3Dread", "surf1Dwrite", "surf2Dwrite", "surf3Dwrite"}
ASM_SPECIAL_RE = re.compile(r"%(ctaid|tid|nctaid|ntid|clusterid|cluster_ctaid)\b")
# an asm statement that is only barrier 0 over the whole block (what __syncthreads() compiles to), and any barrier
ASM_BARRIER0_RE = re.compile(r"(?:asm|__asm__|__asm)\s*(?:volatile|__volatile__)?\s*\(\s*"
                             r"\"\s*(?:bar|barrier)\.sync(?:\.aligned)?\s+0\s*;?\s*\"\s*(?::\s*)*\)", re.S)
ASM_BARRIER_RE = re.compile(r"\b(?:bar|barrier)\.(?:sync|arrive|red)\b")
_MEMBER_KINDS = (K.CXX_METHOD, K.CONSTRUCTOR, K.DESTRUCTOR, K.CONVERSION_FUNCTION)
_CLASS_KINDS = (K.STRUCT_DECL, K.CLASS_DECL, K.UNION_DECL, K.CLASS_TEMPLATE,
                K.CLASS_TEMPLATE_PARTIAL_SPECIALIZATION)
_COLLECTED = {K.NAMESPACE, K.LINKAGE_SPEC, K.UNEXPOSED_DECL, K.FUNCTION_DECL, K.FUNCTION_TEMPLATE, K.VAR_DECL,
              *_MEMBER_KINDS, *_CLASS_KINDS}
# headers of this project (parse prelude, CUDA/vendor stubs, rTask runtime): not the user's code
_TOOL_HEADERS = tuple(str(Path(__file__).resolve().parent.parent / d) + os.sep
                      for d in ("converter/include", "toolchain/include", "vdevice/include"))
STRIP_RE = re.compile(r"\b(__shared__|static|volatile|extern)\b\s*")


class ConversionError(Exception):
    """A file that cannot be converted; `diagnostics` holds one `file:line:col: error: …` line per problem.

    `refused` lists the kernels that were refused, as in ConversionResult.refused
    (`[{name, diagnostics}]`); it is empty when the file itself could not be read or holds no kernel.
    """

    def __init__(self, diagnostics: list[str], refused: list[dict] | None = None):
        super().__init__("\n".join(diagnostics))
        self.diagnostics = diagnostics
        self.refused = list(refused or [])


@dataclass
class Edit:
    start: int
    end: int
    text: str


@dataclass
class SharedVar:
    name: str
    member: str
    decl_text: str        # member declaration (no storage keywords), e.g. "float tile[16][17]"
    volatile: bool
    size: int | None      # bytes, None when it depends on template arguments
    align: int | None
    stmt: ci.Cursor | None
    consts: tuple[tuple[str, str], ...] = ()  # local constants its declaration names: (name, static member text)


@dataclass
class Func:
    cursor: ci.Cursor
    name: str
    qualname: str
    start: int
    end: int
    body: ci.Cursor
    is_kernel: bool
    is_template: bool
    uses_indices: bool = False
    shared: list[SharedVar] = field(default_factory=list)
    extern_shared: bool = False
    barrier_sites: list[tuple[int, str]] = field(default_factory=list)
    warp_sites: list[ci.Cursor] = field(default_factory=list)
    barrier_calls: list[ci.Cursor] = field(default_factory=list)
    asm_barriers: list[ci.Cursor] = field(default_factory=list)  # `asm("bar.sync 0;")` statements
    cg_calls: list[tuple[ci.Cursor, str]] = field(default_factory=list)
    cg_types: list[tuple[ci.Cursor, str]] = field(default_factory=list)
    calls: list[tuple[ci.Cursor, str]] = field(default_factory=list)
    global_shared: set[str] = field(default_factory=set)
    generic_group: bool = False  # a parameter of type cg::thread_group (the clone takes any rTask group)
    macro_intrinsics: bool = False
    refusals: list[tuple[int, str]] = field(default_factory=list)
    features: set[str] = field(default_factory=set)
    extern_c: bool = False          # declared inside (or with) a C linkage specification
    texture_calls: list[tuple[int, int, set]] = field(default_factory=list)  # (start, end, texture var USRs)
    lambdas: list[ci.Cursor] = field(default_factory=list)
    header_warp_calls: list[tuple[ci.Cursor, str]] = field(default_factory=list)  # (call, what it reaches)
    file: _File | None = None       # the local header that defines it; None: the main file
    member: ci.CursorKind | None = None  # a member function of a .cu class: its kind (method, operator...)

    @property
    def needs_context(self) -> bool:
        return bool(self.uses_indices or self.shared or self.barrier_sites or self.warp_sites
                    or self.cg_calls or self.cg_types or self.global_shared or self.header_warp_calls)


@dataclass
class ConversionResult:
    """Converted source text plus the metadata of each rKernel, and the kernels that were refused."""
    output: str
    rkernels: list[RKernelMeta]
    refused: list[dict]
    warnings: list[str]
    inputs: list[str] = field(default_factory=list)  # every file the parse opened (headers, -include files)


class _Tokens:
    """One file's tokens with their byte offsets, for locating names, parentheses and qualifiers."""

    def __init__(self, tu: ci.TranslationUnit, raw: bytes, extent: ci.SourceRange, filename: str):
        # Tokenizing an extent lexes one file only (clang_tokenize works on one file's buffer), so no per-token
        # file check is needed: asking each token for its file cost more than half of a conversion. One location
        # query per token gives its start; its end follows from its spelling when the raw bytes agree (a token
        # split by a backslash-newline falls back to its extent).
        self.spell, self.start, self.end, self.kind = [], [], [], []
        for t in tu.get_tokens(extent=extent):
            sp = t.spelling
            start = t.location.offset
            b = sp.encode()
            end = start + len(b)
            if raw[start:end] != b:
                ext = t.extent
                if ext.start.file is None or ext.start.file.name != filename:
                    continue
                start, end = ext.start.offset, ext.end.offset
            self.spell.append(sp)
            self.start.append(start)
            self.end.append(end)
            self.kind.append(t.kind)

    def at(self, offset: int) -> int:
        """Index of the token starting at offset, or -1."""
        i = bisect.bisect_left(self.start, offset)
        return i if i < len(self.start) and self.start[i] == offset else -1

    def first_from(self, offset: int) -> int:
        return bisect.bisect_left(self.start, offset)

    def qualified_start(self, i: int) -> int:
        """Index of the first token of the qualified name ending at token i (`a::b::name`, `::name`)."""
        while i >= 2 and self.spell[i - 1] == "::" and self.kind[i - 2] == ci.TokenKind.IDENTIFIER:
            i -= 2
        if i >= 1 and self.spell[i - 1] == "::":
            i -= 1
        return i

    def matching(self, i: int, open_: str, close: str) -> int:
        """Index of the token closing the bracket opened at i."""
        depth = 0
        for j in range(i, len(self.spell)):
            s = self.spell[j]
            if s == open_:
                depth += 1
            elif s == close:
                depth -= 1
            elif close == ">" and s == ">>":
                depth -= 2
            if depth <= 0 and j > i:
                return j
        return -1


@dataclass
class _File:
    """A file whose text the converter edits or copies from: the main file, or a local header whose device
    functions are cloned into the converted output (the header itself is never written)."""
    path: str
    raw: bytes
    tok: _Tokens
    line_starts: list[int]

    def location(self, offset: int) -> tuple[int, int]:
        """1-based (line, col) of a byte offset."""
        return line_col(self.line_starts, offset)


def _diag(src: ParsedSource, offset: int, msg: str, level: str = "error") -> str:
    line, col = src.location(offset)
    return f"{src.filename}:{line}:{col}: {level}: {msg}"


def _attrs(c: ci.Cursor) -> set:
    return {ch.kind for ch in c.get_children() if ch.kind.is_attribute()}


def _is_device(c: ci.Cursor) -> bool:
    """__device__ on the declaration or, for a member defined outside its class, on the one in the class."""
    return K.CUDADEVICE_ATTR in _attrs(c) or (c.canonical != c and K.CUDADEVICE_ATTR in _attrs(c.canonical))


def _qualifying_class(call: ci.Cursor) -> str:
    """The class a dependent qualified call names (`BlockSum<BLOCK>::first_index()`: "BlockSum"), or ""."""
    callee = next(iter(call.get_children()), None)
    while callee is not None and callee.kind == K.UNEXPOSED_EXPR:
        callee = next(iter(callee.get_children()), None)
    if callee is None or callee.kind != K.DECL_REF_EXPR:
        return ""
    refs = [c.referenced for c in callee.get_children() if c.kind in (K.TEMPLATE_REF, K.TYPE_REF)]
    return refs[-1].spelling if refs and refs[-1] is not None and refs[-1].kind in _CLASS_KINDS else ""


def _member_callee(call: ci.Cursor) -> ci.Cursor | None:
    """The `obj.name` / `ptr->name` of a member call (None for a call of a free function)."""
    callee = next(iter(call.get_children()), None)
    while callee is not None and callee.kind == K.UNEXPOSED_EXPR:
        callee = next(iter(callee.get_children()), None)
    return callee if callee is not None and callee.kind == K.MEMBER_REF_EXPR else None


def _in_cg(ref: ci.Cursor | None) -> bool:
    p = ref.semantic_parent if ref is not None else None
    while p is not None and p.kind != K.TRANSLATION_UNIT:
        if p.spelling == "cooperative_groups":
            return True
        p = p.semantic_parent
    return False


def _overload_candidates(call: ci.Cursor) -> list[ci.Cursor]:
    """A dependent call's candidates (in a template body clang leaves it unresolved, with those it found by name);
    the search stops at a nested call, whose candidates are its own."""
    for c in call.walk_preorder():
        if c.kind == K.OVERLOADED_DECL_REF:
            lib = ci.conf.lib
            return [lib.clang_getOverloadedDecl(c, i) for i in range(lib.clang_getNumOverloadedDecls(c))]
        if c is not call and c.kind == K.CALL_EXPR:
            return []
    return []


def _callees(call: ci.Cursor) -> list[ci.Cursor]:
    """The function a call names, or every candidate of a dependent call."""
    return [call.referenced] if call.referenced is not None else _overload_candidates(call)


def _dependent_cg_call(call: ci.Cursor) -> bool:
    """A call whose arguments depend on template parameters (`cg::sync(g)` in a helper generic over the group
    type): clang leaves it unresolved, with the cooperative_groups candidates it found by name."""
    return any(_in_cg(d) for d in _overload_candidates(call))


def _is_texture(var: ci.Cursor) -> bool:
    """A legacy texture/surface reference variable (`texture<float, 1, cudaReadModeElementType> tex;`)."""
    t = var.type.spelling
    return t.startswith(("texture<", "surface<", "const texture<", "const surface<"))


def _qualname(c: ci.Cursor) -> str:
    parts = [c.spelling]
    p = c.semantic_parent
    while p is not None and p.kind in (K.NAMESPACE, *_CLASS_KINDS):
        if p.spelling:
            parts.append(p.spelling)
        p = p.semantic_parent
    return "::".join(reversed(parts))


class Converter:
    """Analyses one translation unit and produces the edits that turn its kernels into rKernels."""

    def __init__(self, src: ParsedSource):
        self.src = src
        raw = src.text.encode()
        self.main = _File(src.filename, raw, _Tokens(src.tu, raw, src.tu.cursor.extent, src.filename),
                          src._line_starts)
        self.headers: dict[str, _File | None] = {}   # local headers read so far, by path (None: unreadable)
        self.file = self.main                        # the file whose text raw/tok are: the function's being read
        self.raw, self.tok = raw, self.main.tok
        self.funcs: dict[str, Func] = {}          # by USR
        self.by_name: dict[str, list[Func]] = {}
        self.global_shared: dict[str, SharedVar] = {}
        self.fwd_decls: dict[str, list[ci.Cursor]] = {}   # device functions declared before their definition
        self.member_defs: dict[str, list[ci.Cursor]] = {}  # device member functions of the .cu classes, by name
        self._dyn_classes: dict[str, bool] = {}   # class USR -> whether a member declares an extern __shared__
        self._tex_functors: dict[str, tuple[int, str]] | None = None  # classes whose operator() fetches textures
        self.warnings: list[str] = []

    @contextmanager
    def reading(self, f: Func) -> Iterator[None]:
        """raw/tok are those of the file that spells f while f is analysed, edited or cloned."""
        prev = self.file
        self.file = f.file or self.main
        self.raw, self.tok = self.file.raw, self.file.tok
        try:
            yield
        finally:
            self.file, self.raw, self.tok = prev, prev.raw, prev.tok

    def _header_file(self, path: str) -> _File | None:
        """A local header's text and tokens, read once."""
        if path not in self.headers:
            try:
                raw = Path(path).read_bytes()
                cf = self.src.tu.get_file(path)
                extent = ci.SourceRange.from_locations(ci.SourceLocation.from_offset(self.src.tu, cf, 0),
                                                       ci.SourceLocation.from_offset(self.src.tu, cf, len(raw)))
                self.headers[path] = _File(path, raw, _Tokens(self.src.tu, raw, extent, path), line_starts(raw))
            except (OSError, ci.TranslationUnitLoadError):
                self.headers[path] = None
        return self.headers[path]

    # ---- analysis -------------------------------------------------------------------------------------
    def collect(self) -> None:
        self._collect(self.src.tu.cursor)
        for f in list(self.funcs.values()):  # local-header callees are added (and analysed) on the way
            self._analyse(f)

    def _collect(self, parent: ci.Cursor, extern_c: bool | None = False) -> None:
        """Device functions and file-scope __shared__ variables of the main file. `extern_c`: the linkage of the
        enclosing specification, True/False, or None when it is spelled through a macro (decided per function
        from its mangled name: a C-linkage function's is its plain name)."""
        for c in parent.get_children():
            kind = c.kind
            # cheap checks first: most top-level cursors are macro definitions/expansions and declarations of
            # the parse prelude, which need no location query at all
            if kind not in _COLLECTED:
                continue
            if kind in (K.FUNCTION_DECL, K.FUNCTION_TEMPLATE) and not c.is_definition():
                if self.src.is_main(c) and K.CUDADEVICE_ATTR in _attrs(c):
                    self.fwd_decls.setdefault(c.get_usr(), []).append(c)
                continue
            if not self.src.is_main(c):
                continue
            if kind in (K.NAMESPACE, K.LINKAGE_SPEC, K.UNEXPOSED_DECL):
                self._collect(c, self._c_linkage(c, extern_c))
            elif kind in _CLASS_KINDS:
                self._collect(c, extern_c)
            elif kind in _MEMBER_KINDS or (kind == K.FUNCTION_TEMPLATE and c.semantic_parent is not None
                                           and c.semantic_parent.kind in _CLASS_KINDS):
                if not _is_device(c):
                    continue
                if c.is_definition():
                    self.member_defs.setdefault(c.spelling, []).append(c)
                else:  # declared in its class, defined outside: a clone's declaration goes beside it
                    self.fwd_decls.setdefault(c.get_usr(), []).append(c)
            elif kind in (K.FUNCTION_DECL, K.FUNCTION_TEMPLATE):
                attrs = _attrs(c)
                body = next((ch for ch in c.get_children() if ch.kind == K.COMPOUND_STMT), None)
                if body is None or not (attrs & {K.CUDAGLOBAL_ATTR, K.CUDADEVICE_ATTR}):
                    continue
                c_linkage = extern_c is True or (extern_c is None and kind == K.FUNCTION_DECL
                                                 and c.mangled_name == c.spelling)
                f = Func(c, c.spelling, _qualname(c), c.extent.start.offset, c.extent.end.offset, body,
                         K.CUDAGLOBAL_ATTR in attrs, c.kind == K.FUNCTION_TEMPLATE, extern_c=c_linkage)
                self.funcs[c.get_usr()] = f
                self.by_name.setdefault(c.spelling, []).append(f)
            elif c.kind == K.VAR_DECL and K.CUDASHARED_ATTR in _attrs(c):
                self.global_shared[c.spelling] = self._shared_var(c, None, c.spelling, c)

    def _c_linkage(self, spec: ci.Cursor, outer: bool | None) -> bool | None:
        """Linkage inside `spec`: a linkage specification `extern "C" decl` / `extern "C" { ... }` read from its
        first tokens (None when they come from a macro); a namespace keeps the enclosing linkage."""
        if spec.kind == K.NAMESPACE:
            return outer
        i = self.tok.at(spec.extent.start.offset)
        if 0 <= i < len(self.tok.spell) - 1 and self.tok.spell[i] == "extern":
            return self.tok.spell[i + 1] == '"C"'
        return None

    def _shared_var(self, var: ci.Cursor, stmt: ci.Cursor | None, member: str, first: ci.Cursor) -> SharedVar:
        """Member declaration text for a __shared__ variable, from its own source text."""
        name_off = var.location.offset
        first_name_off = first.location.offset
        head_start = (stmt or var).extent.start.offset
        prefix = self.raw[head_start:first_name_off].decode()
        suffix = self.raw[name_off + len(var.spelling.encode()):var.extent.end.offset].decode()
        volatile = bool(re.search(r"\bvolatile\b", prefix))
        prefix = STRIP_RE.sub("", prefix).strip()
        size, align = var.type.get_size(), var.type.get_align()
        return SharedVar(var.spelling, member, f"{prefix} {member}{suffix}".strip(), volatile,
                         size if size > 0 else None, align if align > 0 else None, stmt, self._local_consts(var))

    def _local_consts(self, var: ci.Cursor) -> tuple[tuple[str, str], ...]:
        """Function-local constants a __shared__ declaration names (`__shared__ float b[BK * (BN + pad)]` after
        `const int pad = 5;`), and those their initialisers name in turn (`bdy = 32 / bdx`), each after the ones
        it needs: the layout struct sits outside the function, so it gets them as static members."""
        out: dict[str, str] = {}
        seen: set[int] = set()  # declarations by offset

        def visit(node: ci.Cursor) -> None:
            for c in node.walk_preorder():
                ref = c.referenced if c.kind == K.DECL_REF_EXPR else None
                if ref is None or ref.kind != K.VAR_DECL or ref.semantic_parent is None \
                        or ref.semantic_parent.kind not in (K.FUNCTION_DECL, K.FUNCTION_TEMPLATE, K.CXX_METHOD) \
                        or ref.extent.start.offset in seen:
                    continue
                seen.add(ref.extent.start.offset)
                text = self.raw[ref.extent.start.offset:ref.extent.end.offset].decode(errors="replace")
                m = re.fullmatch(r"\s*(?:static\s+)?(const|constexpr)\s+(.+?=.+)", text, re.S)
                if m:
                    visit(ref)  # the constants its initialiser names come first
                    out[ref.spelling] = f"static constexpr {m.group(2).strip()};"
        visit(var)
        return tuple(out.items())

    def _analyse(self, f: Func) -> None:
        with self.reading(f):
            self._analyse_in_file(f)

    def _analyse_in_file(self, f: Func) -> None:
        self._analyse_params(f)
        body_tokens = range(self.tok.first_from(f.body.extent.start.offset),
                            self.tok.first_from(f.body.extent.end.offset))
        for i in body_tokens:
            if self.tok.spell[i] == "<<<":
                f.refusals.append((self.tok.start[i], "dynamic parallelism (a kernel launch inside a kernel) "
                                   "cannot run as an rTask"))
        tex_refs: list[tuple[int, str, str]] = []
        f.texture_calls = []
        for c in f.body.walk_preorder():
            k = c.kind
            if k == K.DECL_REF_EXPR:
                ref = c.referenced
                if ref is None:
                    continue
                if ref.spelling in INDEX_VARS and not self.src.is_main(ref):
                    f.uses_indices = True
                elif ref.kind == K.VAR_DECL and ref.spelling in self.global_shared and self.src.is_main(ref) \
                        and ref.semantic_parent.kind != K.COMPOUND_STMT and K.CUDASHARED_ATTR in _attrs(ref):
                    f.global_shared.add(ref.spelling)
                elif f.file is not None and ref.kind == K.VAR_DECL and K.CUDASHARED_ATTR in _attrs(ref) \
                        and ref.semantic_parent.kind in (K.TRANSLATION_UNIT, K.NAMESPACE):
                    f.refusals.append((c.extent.start.offset, f"file-scope __shared__ '{ref.spelling}' of a header "
                                       "has no place in the rTask's shared-memory layout"))
                if ref.kind == K.VAR_DECL and _is_texture(ref):
                    tex_refs.append((c.extent.start.offset, ref.get_usr(), f"texture/surface reference "
                                     f"'{ref.spelling}' (removed in CUDA 12) cannot run as an rTask"))
            elif k == K.DECL_STMT:
                vars_ = [v for v in c.get_children() if v.kind == K.VAR_DECL]
                shared = [v for v in vars_ if K.CUDASHARED_ATTR in _attrs(v)]
                if not shared:
                    continue
                if len(shared) != len(vars_):
                    f.refusals.append((c.extent.start.offset, "a declaration mixing __shared__ and other variables"))
                    continue
                for v in shared:
                    if v.storage_class == ci.StorageClass.EXTERN:
                        f.extern_shared = True
                        f.features.add("dynamic_shared")
                    else:
                        f.shared.append(self._shared_var(v, c, v.spelling, shared[0]))
                        f.features.add("static_shared")
                extern = sum(1 for v in shared if v.storage_class == ci.StorageClass.EXTERN)
                if f.extern_shared and len(shared) > extern \
                        and any(v.storage_class == ci.StorageClass.EXTERN for v in shared):
                    f.refusals.append((c.extent.start.offset, "extern and static __shared__ in one declaration"))
            elif k == K.CALL_EXPR:
                self._call(f, c)
                self._texture_functor_call(f, c)
            elif k in (K.TYPE_REF, K.TEMPLATE_REF):
                ref = c.referenced
                name = ref.spelling if ref is not None else ""
                if ref is not None and ref.kind in _CLASS_KINDS and self._hands_out_dynamic_smem(ref):
                    f.extern_shared = True  # SharedMemory<T>: its conversion returns the extern __shared__ array
                    f.features.add("dynamic_shared")
                if _in_cg(ref):
                    if name in CG_TYPES:
                        f.cg_types.append((c, name))
                        f.features.add("cooperative_groups")
                    elif name == "grid_group":
                        f.refusals.append((c.extent.start.offset, f"{GRID_SYNC} (grid_group) "
                                           "cannot run as an rTask"))
            elif k == K.LAMBDA_EXPR:
                f.lambdas.append(c)
            elif k == K.ASM_STMT:
                text = self.raw[c.extent.start.offset:c.extent.end.offset].decode(errors="replace")
                m = ASM_SPECIAL_RE.search(text)
                if m:
                    f.refusals.append((c.extent.start.offset, f"inline asm reads %{m.group(1)}, which has no "
                                       "meaning inside an rTask"))
                elif ASM_BARRIER0_RE.fullmatch(text):  # `asm volatile("bar.sync 0;")`: the block's barrier
                    f.barrier_sites.append((c.extent.start.offset, "__syncthreads"))
                    f.features.add("barrier")
                    f.asm_barriers.append(c)
                elif ASM_BARRIER_RE.search(text):
                    f.refusals.append((c.extent.start.offset, "inline asm barrier (a named barrier or a thread "
                                       "count) cannot run as an rTask: the rTask's threads are not the block's"))
                else:
                    f.features.add("inline_asm")
        # a texture variable read as the argument of a refused texture call is that call's problem, reported once
        for off, usr, msg in tex_refs:
            if not any(s <= off < e and usr in used for s, e, used in f.texture_calls):
                f.refusals.append((off, msg))

    def _texture_functor_call(self, f: Func, call: ci.Cursor) -> None:
        """`f(i)` on an object of a template parameter type (a functor passed as a template argument): when a class
        of this file whose operator() fetches from a texture is one such argument (named in a template argument
        list or a launch), the call would run that fetch in the rTask: refused here, at the call."""
        ref = call.referenced
        if f.file is not None or ref is None or ref.kind not in (K.PARM_DECL, K.VAR_DECL) \
                or ref.type.get_canonical().kind != ci.TypeKind.UNEXPOSED:
            return
        for cls, (line, fetch) in self._texture_functors().items():
            if re.search(rf"<[^;<>]*\b{re.escape(cls)}\b[^;<>]*>|>>>\s*\([^;]*\b{re.escape(cls)}\s*[({{]",
                         self.src.text):
                f.refusals.append((call.extent.start.offset, f"'{ref.spelling}' ({ref.type.spelling}) is called as a "
                                   f"functor, and '{cls}' is passed for it: its operator() (line {line}) uses "
                                   f"texture/surface access {fetch}, which cannot run as an rTask"))
                return

    def _texture_functors(self) -> dict[str, tuple[int, str]]:
        """Classes of this file whose operator() calls a texture/surface fetch: name -> (line, fetch)."""
        if self._tex_functors is None:
            self._tex_functors = {}
            for d in self.member_defs.get("operator()", []):
                for c in d.walk_preorder():
                    if c.kind == K.CALL_EXPR and self.call_name(c) in TEXTURE_CALLS and d.semantic_parent is not None:
                        self._tex_functors[d.semantic_parent.spelling] = (d.location.line, self.call_name(c))
                        break
        return self._tex_functors

    def _hands_out_dynamic_smem(self, cls: ci.Cursor) -> bool:
        """Whether a class of the user's code (the CUDA samples' SharedMemory<T>) declares an extern __shared__
        array in one of its members: a kernel that names it uses the block's dynamic shared memory."""
        key = cls.get_usr()
        if key not in self._dyn_classes:
            f = cls.location.file
            self._dyn_classes[key] = f is not None and not cls.location.is_in_system_header \
                and not os.path.abspath(f.name).startswith(_TOOL_HEADERS) \
                and any(c.kind == K.VAR_DECL and c.storage_class == ci.StorageClass.EXTERN
                        and K.CUDASHARED_ATTR in _attrs(c) for c in cls.walk_preorder())
        return self._dyn_classes[key]

    def _analyse_params(self, f: Func) -> None:
        """Parameters of cooperative_groups types (`cg::thread_block_tile<32> tile`): the function is called with
        the rTask's groups (rt::Tile / rt::TaskGroup), so it needs the task context and its parameter types are
        rewritten in its clone."""
        if f.is_kernel:
            return
        for p in f.cursor.get_children():
            if p.kind != K.PARM_DECL:
                continue
            for c in p.walk_preorder():
                # `cg::thread_block_tile<32>` is NAMESPACE_REF cg, TEMPLATE_REF thread_block_tile: the qualifier
                # alone names no type, the TYPE_REF/TEMPLATE_REF after it does (and is resolved through aliases)
                if c.kind not in (K.TYPE_REF, K.TEMPLATE_REF):
                    continue
                ref = c.referenced
                if not _in_cg(ref):
                    continue
                name = ref.spelling
                f.features.add("cooperative_groups")
                if name in CG_TYPES:
                    f.cg_types.append((c, name))
                elif name == "thread_group":  # any group: the clone is a template over the group it is passed
                    f.cg_types.append((c, name))
                    f.generic_group = True
                elif name in CG_NATIVE:
                    continue
                elif name == "grid_group":
                    f.refusals.append((c.extent.start.offset, f"{GRID_SYNC} (grid_group) "
                                       "cannot run as an rTask"))
                else:
                    f.refusals.append((c.extent.start.offset, f"parameter of cooperative_groups type '{name}': "
                                       "only thread_block, thread_block_tile and thread_group have rTask "
                                       "counterparts"))

    def call_name(self, c: ci.Cursor) -> str:
        """The called function's name; dependent calls in templates have no spelling, so read the tokens."""
        if c.spelling:
            return c.spelling
        callee = next(iter(c.get_children()), None)
        if callee is None:
            return ""
        i = self.tok.first_from(callee.extent.start.offset)
        name = ""
        while i < len(self.tok.spell) and self.tok.start[i] < callee.extent.end.offset:
            if self.tok.spell[i] == "<":  # `Cls<N>::name`: past the class's arguments; `name<T>`: done
                j = self.tok.matching(i, "<", ">")
                if j < 0 or j + 1 >= len(self.tok.spell) or self.tok.spell[j + 1] != "::":
                    break
                i = j + 1
                continue
            if self.tok.kind[i] == ci.TokenKind.IDENTIFIER:
                name = self.tok.spell[i]
            i += 1
        return name

    def _call(self, f: Func, c: ci.Cursor) -> None:
        name = self.call_name(c)
        ref = c.referenced
        off = c.extent.start.offset
        if name in BARRIERS and (ref is None or not self.src.is_main(ref)):
            f.barrier_sites.append((off, name))
            f.features.add("barrier" if name == "__syncthreads" else "barrier_reduction")
            if self._direct(c, name):
                f.barrier_calls.append(c)
            else:
                f.macro_intrinsics = True
                f.features.add("macro_barrier")
        elif name in WARP_MASKED and (ref is None or not self.src.is_main(ref)):
            f.features.add("warp_intrinsics")
            if self._direct(c, name):
                f.warp_sites.append(c)
            else:
                f.refusals.append((off, f"warp intrinsic {name} reached through a macro: its mask cannot be "
                                   "restricted to the rTask's lanes"))
        elif name in TEXTURE_CALLS:
            f.refusals.append((off, f"texture/surface access {name} cannot run as an rTask"))
            used = {d.referenced.get_usr() for d in c.walk_preorder()
                    if d.kind == K.DECL_REF_EXPR and d.referenced is not None and d.referenced.kind == K.VAR_DECL
                    and _is_texture(d.referenced)}
            f.texture_calls.append((off, c.extent.end.offset, used))
        elif name == "this_grid" and (ref is None or _in_cg(ref)):
            f.refusals.append((off, f"{GRID_SYNC} (this_grid) cannot run as an rTask"))
        elif name in CG_CALLS and (_in_cg(ref) or (ref is None and _dependent_cg_call(c))) \
                and (ref is None or ref.kind != K.CXX_METHOD):
            f.cg_calls.append((c, name))
            f.features.add("cooperative_groups")
            size = self._tile_size(c) if name == "tiled_partition" else None
            if size is not None and not (0 < size <= 1024 and size & (size - 1) == 0):
                f.refusals.append((off, f"tiled_partition<{size}>: CUDA's tiles are a power of two from 1 to 1024 "
                                   "threads"))
            if name == "sync":
                f.barrier_sites.append((off, "cg::sync"))
        elif name == "sync" and ref is not None and ref.kind == K.CXX_METHOD and _in_cg(ref) \
                and ref.semantic_parent.spelling in ("thread_block", "thread_group"):
            f.barrier_sites.append((off, "thread_block.sync"))
        else:
            targets = self._resolve(c) or self._member_targets(c)
            if targets:
                f.calls += [(c, t) for t in targets]
                if any(self.funcs[t].is_kernel for t in targets):
                    f.refusals.append((off, "dynamic parallelism (a kernel launch inside a kernel) cannot run as an "
                                            "rTask"))
            else:  # a local header's function (every candidate of a dependent call) that needs the context
                self._function_arguments(f, c)
                # a lambda of f itself is converted with f's body: its call is no member call to refuse
                found = [(d, x) for d in _callees(c) if not self._own_lambda(f, d)
                         for x in [self._header_context(d, set())] if x is not None]
                usrs = [self._adopt(d) for d, _ in found] if self.tok.at(off) >= 0 else [None]
                if found and all(usrs):  # cloned into the output like callees of the .cu file
                    f.calls += [(c, u) for u in usrs if u is not None]
                elif found:
                    where, what, hard = found[0][1]
                    if hard or self.tok.at(off) < 0:
                        member = (found[0][0].get_definition() or found[0][0]).kind in _MEMBER_KINDS
                        f.refusals.append((off, f"'{name}' (a member of a class in {where}) uses {what}: a local "
                                           "header's class cannot be given a clone that takes the rTask (the header "
                                           "is not rewritten)" if member else
                                           f"'{name}' (defined in {where}) uses {what}: a device function "
                                           "that needs the rTask context is converted only when it is a function "
                                           "at namespace scope spelled in the .cu file or a local header"))
                    else:  # left as it is, behind a run-time check that the rTask's warps are whole
                        f.header_warp_calls.append((c, f"{name} ({where}: {what})"))
                        f.features.add("header_warp_intrinsics")

    def _own_lambda(self, f: Func, ref: ci.Cursor) -> bool:
        """Whether `ref` is the call operator of a lambda written inside f (main-file f: its body is f's)."""
        d = ref.get_definition() or ref
        return f.file is None and d.kind == K.CXX_METHOD and d.location.file is not None and self.src.is_main(d) \
            and f.start <= d.extent.start.offset < f.end

    def _function_arguments(self, f: Func, call: ci.Cursor) -> None:
        """Header functions passed as template arguments (llm.c's `blockReduce<warpReduceSum>(v)`): called through
        the parameter, they run as they are, unconverted. Warp intrinsics only: right while the rTask's warps are
        whole, so the call is made behind that check; anything more is refused."""
        callee = next(iter(call.get_children()), None)
        while callee is not None and callee.kind == K.UNEXPOSED_EXPR:
            callee = next(iter(callee.get_children()), None)
        if callee is None or callee.kind != K.DECL_REF_EXPR:
            return
        for arg in callee.get_children():
            ref = arg.referenced if arg.kind == K.DECL_REF_EXPR else None
            found = self._header_context(ref, set()) if ref is not None else None
            if found is None:
                continue
            where, what, hard = found
            off = arg.extent.start.offset
            if hard or self.tok.at(call.extent.start.offset) < 0:
                f.refusals.append((off, f"'{ref.spelling}' (defined in {where}) uses {what}: passed as a template "
                                   "argument, it would run unconverted in the rTask"))
            elif not any(c == call for c, _ in f.header_warp_calls):
                f.header_warp_calls.append((call, f"{ref.spelling} ({where}: {what})"))
                f.features.add("header_warp_intrinsics")

    def _header_definition(self, ref: ci.Cursor) -> ci.Cursor | None:
        """The definition (the template's, for an instantiation) of a device function spelled in a local header
        (beside the .cu file or on its include path): not the C/C++ library, nor this project's own headers."""
        d = ref.get_definition() or ref
        if d.kind == K.FUNCTION_DECL:  # an instantiation: its template's body is the one spelled in the header
            tmpl = ci.conf.lib.clang_getSpecializedCursorTemplate(d)
            if tmpl is not None and tmpl.kind == K.FUNCTION_TEMPLATE:
                d = tmpl.get_definition() or tmpl
        loc = d.location.file
        if loc is None or self.src.is_main(d) or d.kind not in (K.FUNCTION_DECL, K.FUNCTION_TEMPLATE, K.CXX_METHOD):
            return None
        if d.location.is_in_system_header or os.path.abspath(loc.name).startswith(_TOOL_HEADERS):
            return None  # the C/C++ library, or this project's parse prelude, stubs and runtime
        return d

    def _member_definition(self, ref: ci.Cursor) -> ci.Cursor | None:
        """The definition of a member function (method, operator, constructor; the template's, for an
        instantiation) spelled in the .cu file: never cloned (the object would have to carry the task), so one that
        needs the rTask context is refused at the call, like a header's member."""
        d = ref.get_definition() or ref
        tmpl = ci.conf.lib.clang_getSpecializedCursorTemplate(d)
        if tmpl is not None and tmpl.kind in (K.FUNCTION_TEMPLATE, *_MEMBER_KINDS):
            d = tmpl.get_definition() or tmpl
        parent = d.semantic_parent
        member = d.kind in _MEMBER_KINDS or (d.kind == K.FUNCTION_TEMPLATE and parent is not None
                                             and parent.kind in _CLASS_KINDS)
        return d if member and d.location.file is not None and self.src.is_main(d) else None

    def _member_targets(self, call: ci.Cursor) -> list[str]:
        """The device member functions of the .cu file's classes a call may reach (keys in funcs, adopted and
        analysed here): the one it names, or for a dependent `obj.name(...)` in a template those of that name (of
        the object's class, when its type names one). Each that needs the rTask context is cloned into its class."""
        defs = [d for d in (self._member_definition(r) for r in _callees(call)) if d is not None]
        if not defs and call.referenced is None:
            named = self.member_defs.get(self.call_name(call), [])
            member, cls = _member_callee(call), _qualifying_class(call)
            if member is not None:  # `obj.name(...)`: the object's class when its type names one, else any
                base = next(iter(member.get_children()), None)
                cls = re.sub(r"^(const\s+|volatile\s+|struct\s+|class\s+)*", "",
                             base.type.spelling if base is not None else "").split("<")[0].strip(" *&")
            own = [d for d in named if d.semantic_parent is not None and d.semantic_parent.spelling == cls]
            defs = own or (list(named) if member is not None else [])
        usrs = [self._adopt_member(d) for d in defs]
        return list(dict.fromkeys(u for u in usrs if u is not None))

    def _adopt_member(self, d: ci.Cursor) -> str | None:
        """A .cu class's member function as a callee (its key in funcs): analysed like a free function; one that
        needs the rTask context gets a clone beside it in its class."""
        usr = d.get_usr()
        if usr in self.funcs:
            return usr
        body = next((ch for ch in d.get_children() if ch.kind == K.COMPOUND_STMT), None)
        if body is None or not _is_device(d):
            return None
        g = Func(d, d.spelling, _qualname(d), d.extent.start.offset, d.extent.end.offset, body, False,
                 d.kind == K.FUNCTION_TEMPLATE, member=d.kind)
        self.funcs[usr] = g
        self._analyse(g)
        return usr

    def _adopt(self, ref: ci.Cursor) -> str | None:
        """Take a local header's device function in as a callee to clone (its key in funcs), or None when it
        cannot be: not at namespace scope (a member), no body, or its name not a token of the header (a macro)."""
        d = self._header_definition(ref)
        if d is None:
            return None
        usr = d.get_usr()
        if usr in self.funcs:
            return usr
        scope = d.semantic_parent
        while scope is not None and scope.kind == K.NAMESPACE:
            scope = scope.semantic_parent
        body = next((ch for ch in d.get_children() if ch.kind == K.COMPOUND_STMT), None)
        file = self._header_file(d.location.file.name)
        if scope is None or scope.kind != K.TRANSLATION_UNIT or body is None or file is None \
                or file.tok.at(d.location.offset) < 0:
            return None
        g = Func(d, d.spelling, _qualname(d), d.extent.start.offset, d.extent.end.offset, body, False,
                 d.kind == K.FUNCTION_TEMPLATE, file=file)
        self.funcs[usr] = g
        self._analyse(g)
        return usr

    def _header_context(self, ref: ci.Cursor, seen: set[str]) -> tuple[str, str, bool] | None:
        """(header, construct, hard) when `ref` is a device function defined in a local header (beside the .cu
        file) that needs the rTask context, itself or through the header functions it calls: what _adopt clones, or
        (when it cannot) what the call is refused for. Hard: it reads the legacy indices, synchronises, uses
        cooperative groups or __shared__ memory (left as it is, a hardware barrier or index would run in the rTask:
        llm.c's common.h blockReduce). Not hard: only warp intrinsics (warpReduceSum's full-mask shuffles), right as
        it is while every warp of the rTask is whole."""
        d = self._header_definition(ref) or self._member_definition(ref)
        if d is None or d.get_usr() in seen:
            return None
        seen.add(d.get_usr())
        where = os.path.basename(d.location.file.name)
        soft: tuple[str, str, bool] | None = None
        for c in d.walk_preorder():
            if c.kind == K.DECL_REF_EXPR and c.spelling in INDEX_VARS:
                return where, c.spelling, True
            if c.kind == K.VAR_DECL and K.CUDASHARED_ATTR in _attrs(c) and c.storage_class != ci.StorageClass.EXTERN:
                return where, "__shared__ memory", True  # an extern __shared__ array aliases the vEU's buffer
            if c.kind == K.CALL_EXPR:
                callees = _callees(c)
                # a dependent call (`__shfl_xor_sync(mask, v, o)` on a `T v`) has no spelling: its candidates do
                name = c.spelling or next((d.spelling for d in callees), "")
                if name in BARRIERS:
                    return where, name, True
                if any(d is not None and _in_cg(d) for d in callees):
                    return where, "cooperative groups", True
                if name in WARP_MASKED:
                    soft = soft or (where, name, False)
                    continue
                for callee_decl in callees:
                    deeper = self._header_context(callee_decl, seen)
                    if deeper is not None and deeper[2]:
                        return deeper
                    soft = soft or deeper
        return soft

    def _tile_size(self, call: ci.Cursor) -> int | None:
        """The literal size N of `tiled_partition<N>(...)`, or None when it is not an integer literal."""
        i = self._call_name_token(call, "tiled_partition")
        if i < 0 or i + 3 >= len(self.tok.spell) or self.tok.spell[i + 1] != "<" or self.tok.spell[i + 3] != ">":
            return None
        lit = self.tok.spell[i + 2].rstrip("uUlL")
        return int(lit, 0) if lit.isdigit() else None

    def _direct(self, call: ci.Cursor, name: str) -> bool:
        i = self.tok.at(call.extent.start.offset)
        if i >= 0 and self.tok.qualified_start(i) == i and i + 2 < len(self.tok.spell) \
                and self.tok.spell[i + 1] == "::":  # qualified call such as ::__syncthreads()
            i = self._call_name_token(call, name)
        return i >= 0 and self.tok.spell[i] == name

    def _resolve(self, call: ci.Cursor) -> list[str]:
        """The device functions of the .cu file a call may reach (keys in funcs): the one it names, or every
        candidate of a dependent call (each is cloned; overload resolution among the clones picks as before)."""
        ref = call.referenced
        if ref is not None:
            for d in (ref, ref.get_definition(), ci.conf.lib.clang_getSpecializedCursorTemplate(ref)):
                if d is not None and d.get_usr() in self.funcs:
                    return [d.get_usr()]
            if ref.kind in (K.FUNCTION_DECL, K.FUNCTION_TEMPLATE) and ref.spelling in self.by_name:
                cands = self.by_name[ref.spelling]
                return [cands[0].cursor.get_usr()] if len(cands) == 1 else []
            return []
        # dependent calls inside templates: their candidates among the .cu file's device functions (a local
        # header's are adopted by the caller), else by name
        cands = _overload_candidates(call)
        if not cands:  # a dependent call clang kept no candidates for: by name, when the name is not overloaded
            if _member_callee(call) is not None:
                return []  # `obj.name(...)`: a member (_member_targets), not the free function of that name
            by_name = self.by_name.get(self.call_name(call), [])
            return [by_name[0].cursor.get_usr()] if len(by_name) == 1 else []
        usrs = [d.get_usr() for d in cands
                if d is not None and d.get_usr() in self.funcs and self.funcs[d.get_usr()].file is None]
        return list(dict.fromkeys(usrs))

    # ---- reachability ---------------------------------------------------------------------------------
    def reach(self, f: Func) -> list[Func]:
        """Device functions reachable from f (DFS order, f excluded)."""
        seen: dict[str, Func] = {}

        def visit(g: Func) -> None:
            for _, usr in g.calls:
                h = self.funcs.get(usr)
                if h is not None and usr not in seen and h is not f:
                    seen[usr] = h
                    visit(h)
        visit(f)
        return list(seen.values())

    def needs_ctx(self, f: Func, memo: dict | None = None) -> bool:
        memo = {} if memo is None else memo
        key = f.cursor.get_usr()
        if key in memo:
            return memo[key]
        memo[key] = f.needs_context
        res = f.needs_context or any(self.needs_ctx(self.funcs[u], memo) for _, u in f.calls if u in self.funcs)
        memo[key] = res
        return res

    def needs_smem(self, f: Func, memo: dict | None = None) -> bool:
        memo = {} if memo is None else memo
        key = f.cursor.get_usr()
        if key in memo:
            return memo[key]
        memo[key] = bool(f.shared or f.global_shared)
        res = memo[key] or any(self.needs_smem(self.funcs[u], memo) for _, u in f.calls if u in self.funcs)
        memo[key] = res
        return res

    # ---- edits ----------------------------------------------------------------------------------------
    def template_header(self, f: Func) -> tuple[str, list[str], int]:
        """(`template <...>` text, parameter names, index of its closing token) of a function template."""
        if not f.is_template:
            return "", [], -1
        with self.reading(f):  # the file that spells f (a local header's function: the header)
            i = self.tok.at(f.start)
            if i < 0 or self.tok.spell[i] != "template":
                return "", [], -1
            j = self.tok.matching(i + 1, "<", ">")
            text = self.raw[self.tok.start[i]:self.tok.end[j]].decode()
        names = [ch.spelling for ch in f.cursor.get_children()
                 if ch.kind in (K.TEMPLATE_TYPE_PARAMETER, K.TEMPLATE_NON_TYPE_PARAMETER,
                                K.TEMPLATE_TEMPLATE_PARAMETER)]
        return text, names, j

    def _paren_after_name(self, f: Func) -> int:
        i = self.tok.at(f.cursor.location.offset)
        while i < len(self.tok.spell) and self.tok.spell[i] != "(":
            i += 1
        return i

    def body_edits(self, f: Func, layout_members: dict[str, str], clones: dict[str, Func],
                   smem_callees: set[str], sh_decl: str = "") -> list[Edit]:
        """Edits inside a function's body: prelude, shared variables, barriers, warp masks, cg, calls.

        The prelude opens the body in dependency order: `sh_decl` (the rKernel's `auto& __rt_sh = ...`) first,
        since the bindings of file-scope shared variables that follow refer to `__rt_sh`.
        """
        edits: list[Edit] = []
        prelude = [sh_decl] if sh_decl else []
        if f.uses_indices:
            prelude.append("RT_LEGACY_INDICES(__rt);")
        if f.macro_intrinsics:
            prelude.append("RT_SHADOW_INTRINSICS(__rt);")
        for g in sorted(f.global_shared):
            prelude.append(f"auto& {g} = __rt_sh.{layout_members[('', g)]};")
        if prelude:
            edits.append(Edit(f.body.extent.start.offset + 1, f.body.extent.start.offset + 1, " " + " ".join(prelude)))
        stmts: dict[int, list[SharedVar]] = {}
        for v in f.shared:
            stmts.setdefault(v.stmt.extent.start.offset, []).append(v)
        for start, vs in stmts.items():
            end = vs[0].stmt.extent.end.offset
            text = " ".join(f"{'volatile ' if v.volatile else ''}auto& {v.name} = "
                            f"__rt_sh.{layout_members[(f.qualname, v.name)]};" for v in vs)
            edits.append(Edit(start, end, text))
        for c in f.barrier_calls:
            edits += self._rename_call(c, BARRIERS[self.call_name(c)], "__rt")
        for c in f.asm_barriers:
            edits.append(Edit(c.extent.start.offset, c.extent.end.offset, f"{BARRIERS['__syncthreads']}(__rt)"))
        for c in f.warp_sites:
            edits += self._mask_first_arg(c)
        for c, what in f.header_warp_calls:
            edits += [Edit(c.extent.start.offset, c.extent.start.offset,
                           f'(::rt::require_whole_warps(__rt, "{what}"), '),
                      Edit(c.extent.end.offset, c.extent.end.offset, ")")]
        for c, name in f.cg_calls:
            i = self.tok.at(c.extent.start.offset)
            if i < 0:
                continue
            j = i
            while j < len(self.tok.spell) and self.tok.spell[j] != name:
                j += 1
            q = self.tok.qualified_start(j)
            if name == "this_thread_block":
                edits.append(Edit(self.tok.start[q], c.extent.end.offset, "rt::this_task(__rt)"))
            else:
                edits.append(Edit(self.tok.start[q], self.tok.end[j], CG_CALLS[name]))
        for c, name in f.cg_types:
            j = self.tok.at(c.extent.end.offset - len(name))
            if j < 0:
                j = self.tok.first_from(c.extent.start.offset)
                while j < len(self.tok.spell) and self.tok.spell[j] != name:
                    j += 1
            q = self.tok.qualified_start(j)
            edits.append(Edit(self.tok.start[q], self.tok.end[j], CG_TYPES.get(name, GROUP_PARAM)))
        extras: dict[int, set[str]] = {}  # per call: a dependent call renamed once per candidate clone
        for c, usr in f.calls:
            if usr in clones:
                extra = "__rt, __rt_sh" if usr in smem_callees else "__rt"
                extras.setdefault(c.extent.start.offset, set()).add(extra)
                if len(extras[c.extent.start.offset]) > 1:
                    raise _Refuse(c.extent.start.offset, f"call to {clones[usr].name}: some of its overloads use "
                                  "shared memory and some do not, so their clones take different parameters")
                edits += self._rename_call(c, clones[usr].name + "__rt", extra, keep_qualifier=True)
        for lam in f.lambdas:
            edits += self._lambda_captures(f, lam)
        return edits

    def _lambda_captures(self, f: Func, lam: ci.Cursor) -> list[Edit]:
        """Captures for the names the conversion makes local: the task `__rt`, the legacy indices and the
        shared-memory bindings. In CUDA a lambda needs no capture for them (builtins, static storage); converted,
        they are locals, so they are captured by reference: a `[=]` copy of a `__shared__` array or of the task
        state (a `mutable` lambda's own barrier counters) would change the result."""
        i = self.tok.at(lam.extent.start.offset)
        if i < 0 or self.tok.spell[i] != "[":
            return []
        j = self.tok.matching(i, "[", "]")
        inside = self.tok.spell[i + 1:j]
        if inside[:1] == ["&"] and (len(inside) == 1 or inside[1] == ","):
            return []   # [&] already refers to them
        if not inside:
            return [Edit(self.tok.end[i], self.tok.end[i], "&")]
        shared = {v.name for v in f.shared} | set(f.global_shared)
        used: list[str] = []
        for c in lam.walk_preorder():
            if c.kind == K.DECL_REF_EXPR and c.referenced is not None:
                n = c.referenced.spelling
                local = n in shared or (n in INDEX_VARS and not self.src.is_main(c.referenced))
                if local and n not in used:
                    used.append(n)
        names = ["__rt"] + [n for n in used if n not in inside]
        return [Edit(self.tok.start[j], self.tok.start[j], "".join(f", &{n}" for n in names))]

    def _call_name_token(self, c: ci.Cursor, name: str) -> int:
        i = self.tok.first_from(c.extent.start.offset)
        end = c.extent.end.offset
        while i < len(self.tok.spell) and self.tok.start[i] < end:
            if self.tok.spell[i] == name:
                return i
            i += 1
        return -1

    def _rename_call(self, c: ci.Cursor, new: str, extra: str, keep_qualifier: bool = False) -> list[Edit]:
        name = self.call_name(c)
        i = self._call_name_token(c, name)
        if i < 0:
            raise _Refuse(c.extent.start.offset, f"call to {name} reached through a macro cannot be rewritten")
        q = i if keep_qualifier else self.tok.qualified_start(i)
        j = i + 1
        if j < len(self.tok.spell) and self.tok.spell[j] == "<":
            j = self.tok.matching(j, "<", ">") + 1
        if j >= len(self.tok.spell) or self.tok.spell[j] != "(":
            raise _Refuse(c.extent.start.offset, f"call to {name}: cannot find its argument list")
        sep = "" if self.tok.spell[j + 1] == ")" else ", "
        return [Edit(self.tok.start[q], self.tok.end[i], new),
                Edit(self.tok.end[j], self.tok.end[j], extra + sep)]

    def _mask_first_arg(self, c: ci.Cursor) -> list[Edit]:
        i = self._call_name_token(c, self.call_name(c))
        j = i + 1
        if j < len(self.tok.spell) and self.tok.spell[j] == "<":
            j = self.tok.matching(j, "<", ">") + 1
        if self.tok.spell[j + 1] == ")":
            return [Edit(self.tok.end[j], self.tok.end[j], "rt::warp_mask(__rt, 0xffffffffu)")]
        args = list(c.get_arguments())
        if args and args[0].extent.start.offset >= self.tok.end[j]:
            a0s, a0e = args[0].extent.start.offset, args[0].extent.end.offset
        else:  # dependent call: the first argument runs to the first top-level comma
            depth, k = 0, j + 1
            while k < len(self.tok.spell):
                s = self.tok.spell[k]
                if s in "([{":
                    depth += 1
                elif s in ")]}":
                    if depth == 0:
                        break
                    depth -= 1
                elif s == "," and depth == 0:
                    break
                k += 1
            a0s, a0e = self.tok.start[j + 1], self.tok.end[k - 1]
        return [Edit(a0s, a0s, "rt::warp_mask(__rt, "), Edit(a0e, a0e, ")")]


class _Refuse(Exception):
    def __init__(self, offset: int, msg: str):
        super().__init__(msg)
        self.offset, self.msg = offset, msg


def _apply_range(raw: bytes, edits: list[Edit], start: int, end: int) -> str:
    out, pos = [], start
    # the same edit can be found twice (a call site visited once per instantiation of its template): apply it once
    unique = {(e.start, e.end, e.text): e for e in edits}.values()
    for e in sorted(unique, key=lambda e: (e.start, e.end)):
        if e.start < pos:
            raise ValueError(f"overlapping edits at offset {e.start}")
        out.append(raw[pos:e.start])
        out.append(e.text.encode())
        pos = e.end
    out.append(raw[pos:end])
    return b"".join(out).decode()


def _layout_bytes(members: list[SharedVar]) -> int | None:
    off, max_align = 0, 1
    for m in members:
        if m.size is None or m.align is None:
            return None
        off = (off + m.align - 1) // m.align * m.align + m.size
        max_align = max(max_align, m.align)
    return (off + max_align - 1) // max_align * max_align if members else 0


def convert_source(text: str, filename: str, kernels: list[str] | None = None, strict: bool = False,
                   include_dirs: list[str] | None = None, flags: CompileFlags | None = None,
                   parsed: ParsedSource | None = None) -> ConversionResult:
    """Convert every (or every named) __global__ kernel of a CUDA source into an rKernel plus a wrapper.

    `parsed`: the parse of exactly this text, file, include folders and flags, when the caller has it already
    (convert-all parses once and converts from it); the converter never changes a parse."""
    if parsed is None:
        try:
            parsed = parse_cuda(text, filename, include_dirs, flags)
        except SourceInputError as exc:
            raise ConversionError(exc.diagnostics) from None
    src = parsed
    conv = Converter(src)
    conv.collect()
    errors = src.errors()
    all_kernels = [f for f in conv.funcs.values() if f.is_kernel]
    if not all_kernels:
        if errors:
            d = errors[0]
            raise ConversionError([f"{filename}:{d.location.line}:{d.location.column}: error: not a CUDA/C++ "
                                   f"source this tool can read: {d.spelling}"])
        raise ConversionError([f"{filename}:1:1: error: no __global__ kernel found"])
    header_errors = src.header_errors()
    if header_errors:
        names = [f.qualname for f in all_kernels if not kernels or f.name in kernels or f.qualname in kernels]
        raise ConversionError(list(dict.fromkeys(h.diagnostic(names) for h in header_errors)))
    if kernels:
        names = {k for k in kernels}
        missing = names - {f.name for f in all_kernels} - {f.qualname for f in all_kernels}
        if missing:
            known = ", ".join(sorted({f.qualname for f in all_kernels}))
            raise ConversionError([f"{filename}: error: no __global__ kernel named '{m}' (the kernels of this file: "
                                   f"{known})" for m in sorted(missing)])
        chosen = [f for f in all_kernels if f.name in names or f.qualname in names]
    else:
        chosen = all_kernels
    warnings = [f"{filename}:1:1: warning: header '{h}' not found"
                + (f" (included from {src.missing_via[h]})" if h in src.missing_via else "") + "; parsed as empty"
                for h in src.missing_includes]

    split = _split_callees(conv, chosen)
    edits: list[Edit] = []
    rkernels: list[RKernelMeta] = []
    refused: list[dict] = []
    clones_needed: dict[str, Func] = {}
    smem_callees: set[str] = set()
    header_at: dict[str, int] = {}  # where each local-header callee's clone goes in the main file
    for f in chosen:
        reach = conv.reach(f)
        problems: list[tuple[str, int, str]] = []  # (file, offset, message); file "" is the main file
        grid_sync_lines: set[int] = set()  # `cg::grid_group g = cg::this_grid();` is one problem, not two
        for p in ((g.file.path if g.file else "", o, m) for g in [f] + reach for o, m in g.refusals):
            if p[2].startswith(GRID_SYNC) and not p[0]:
                line = src.location(p[1])[0]
                if line in grid_sync_lines:
                    continue
                grid_sync_lines.add(line)
            if p not in problems:
                problems.append(p)
        refused_lines = {src.location(o)[0] for path, o, _ in problems if not path}
        for d in errors:
            # clang's complaint about a construct we refuse (a texture or kernel launch in device code...) would
            # be a second error line for the same problem
            if d.location.line in refused_lines:
                continue
            o = src.offset(d.location.line, d.location.column)
            if any(g.file is None and g.start <= o < g.end for g in [f] + reach):
                problems.append(("", o, d.spelling + _missing_header_hint(src, d.spelling)))
        problems.sort()
        insts: dict[tuple[str, str], list] = {}  # template callees' __shared__ per instantiation called
        for g in reach:
            for v in g.shared:
                if g.is_template and (v.size is None or g.cursor.get_usr() in split):
                    decls = _instantiated_decls(conv, f, reach, g, v)
                    if decls is not None and (len(decls) == 1 or g.cursor.get_usr() in split):
                        insts[(g.qualname, v.name)] = decls
                        continue
                    if v.size is None:
                        problems.append((g.file.path if g.file else "", v.stmt.extent.start.offset,
                                         f"static __shared__ '{v.name}' of a size that depends on the template "
                                         f"arguments of device function '{g.name}', called with no explicit "
                                         "template argument list (or one this tool cannot resolve)"))
        problems += _mixed_candidates(conv, [f] + reach)
        problems += _uncloneable_members(conv, [f] + reach)
        if problems:
            refused.append({"name": f.qualname, "diagnostics": [_problem(conv, *p) for p in problems]})
            continue
        try:
            ctx_callees = [g for g in reach if conv.needs_ctx(g)]
            kedits, meta = _convert_kernel(conv, f, ctx_callees, insts, split)
        except _Refuse as r:
            refused.append({"name": f.qualname, "diagnostics": [_diag(src, r.offset, r.msg)]})
            continue
        edits += kedits
        rkernels.append(meta)
        for g in ctx_callees:
            clones_needed[g.cursor.get_usr()] = g
            if conv.needs_smem(g):
                smem_callees.add(g.cursor.get_usr())
            if g.file is not None:  # before the first of this kernel's functions that reaches it
                key = g.cursor.get_usr()
                users = [h for h in [f] + reach
                         if h.file is None and any(r.cursor.get_usr() == key for r in conv.reach(h))]
                at = min(_top_level_start(h.cursor) for h in users)
                header_at[key] = min(at, header_at.get(key, at))
    if (strict and refused) or not rkernels:
        diags = list(dict.fromkeys(d for r in refused for d in r["diagnostics"]))  # a callee shared by kernels
        raise ConversionError(diags, refused)
    # clones of local-header callees, callees first, before the declarations that use them (and before those
    # declarations' layout structs, inserted at the same offset)
    same_type = SAME_TYPE if split & set(clones_needed) else ""
    first: list[Edit] = [Edit(0, 0, f'#include "rtask_runtime.cuh"\n{same_type}#line 1 "{filename}"\n')]
    for g in _callees_first([clones_needed[u] for u in header_at], conv):
        at = header_at[g.cursor.get_usr()]
        first.append(Edit(at, at, _clone_text(conv, g, clones_needed, smem_callees, split, at)))
    # clones of the .cu file's callees, inserted after each original (and declared after each forward declaration)
    for usr, g in clones_needed.items():
        if g.file is not None:
            continue
        edits.append(Edit(g.end, g.end, _clone_text(conv, g, clones_needed, smem_callees, split)))
        for d in conv.fwd_decls.get(usr, []):
            if d.extent.end.offset < g.start:
                at = _after_semicolon(conv, d)
                edits.append(Edit(at, at, _clone_declaration(conv, d, g, usr in smem_callees, at)))
    out = _apply_range(conv.raw, first + edits, 0, len(conv.raw))
    opened = [inc.include.name for inc in src.tu.get_includes() if inc.include is not None]
    return ConversionResult(out, rkernels, refused, warnings, opened)


# warp intrinsics without a mask, removed for sm_70+ (CUDA 9): nvcc rejects them too, whatever headers are found
_MASKLESS_WARP = {"__shfl": "__shfl_sync", "__shfl_up": "__shfl_up_sync", "__shfl_down": "__shfl_down_sync",
                  "__shfl_xor": "__shfl_xor_sync", "__any": "__any_sync", "__all": "__all_sync",
                  "__ballot": "__ballot_sync"}


def _missing_header_hint(src: ParsedSource, message: str) -> str:
    """For an undeclared name while headers were missing (parsed as empty): which ones may have declared it; for a
    warp intrinsic without a mask (`__shfl`), that it was removed (no header declares it for sm_70+)."""
    m = re.match(r"use of undeclared identifier '(\w+)'", message)
    if m and m.group(1) in _MASKLESS_WARP:
        return (f": '{m.group(1)}' (no mask) was removed for sm_70 and later (CUDA 9); nvcc rejects it too: use "
                f"{_MASKLESS_WARP[m.group(1)]}(mask, ...), e.g. with the full mask 0xffffffff")
    if not src.missing_includes or not re.search(r"undeclared identifier|unknown type name|no template named",
                                                 message):
        return ""
    names = ", ".join(f"'{h}'" + (f" (included from {os.path.basename(src.missing_via[h])})"
                                  if h in src.missing_via else "") for h in src.missing_includes)
    return f": the device code uses a declaration of a header that was not found ({names})"


def _problem(conv: Converter, path: str, offset: int, msg: str) -> str:
    """A refusal's `file:line:col: error:` line, in the main file ("") or the local header that spells it."""
    if not path:
        return _diag(conv.src, offset, msg)
    line, col = conv.headers[path].location(offset)  # type: ignore[union-attr]
    return f"{path}:{line}:{col}: error: {msg}"


def _template_arg_lists(conv: Converter, kernel: Func, reach: list[Func], g: Func,
                        depth: int = 0) -> list[tuple[str, ...]] | None:
    """The explicit template argument lists the kernel's functions call g with, each spelled in names the kernel
    sees (its own template parameters included): a list a template callee h spells in its own parameters
    (llm.c's `blockReduce<warp_reduction>(val, false, 0.0f)` inside `template <reduction_func_t warp_reduction>
    blockReduce(float)`) is rewritten once per list h itself is called with. Longest lists first (a shorter one
    leaves trailing parameters to their defaults). None when a call deduces its arguments or a list cannot be
    resolved so."""
    key = g.cursor.get_usr()
    _, knames, _ = conv.template_header(kernel)
    found: list[tuple[str, ...]] = []
    for h in [kernel] + reach:
        spelled: list[tuple[str, ...]] = []
        with conv.reading(h):
            for c, usr in h.calls:
                if usr != key:
                    continue
                i = conv._call_name_token(c, conv.call_name(c))
                if i < 0 or i + 1 >= len(conv.tok.spell) or conv.tok.spell[i + 1] != "<":
                    return None  # deduced: the arguments are the call's types
                j = conv.tok.matching(i + 1, "<", ">")
                text = conv.raw[conv.tok.end[i + 1]:conv.tok.start[j]].decode()
                spelled.append(tuple(_plain_argument(a) for a in split_top_level(text)))
        _, hnames, _ = conv.template_header(h)
        if h is g:  # a dependent call's candidates include g itself: `g<R>(...)` in g is the same instantiation
            if any(s != tuple(hnames) for s in spelled):
                return None  # recursion over other arguments: not enumerated here
            spelled = []
        if not spelled:
            continue
        if h is kernel or not hnames:
            found += spelled
            continue
        outer = _template_arg_lists(conv, kernel, reach, h, depth + 1) if depth < 3 else None
        if not outer or any(len(o) != len(hnames) for o in outer):
            return None
        for o in outer:
            sub = _substitution(h, hnames, o)
            found += [tuple(_plain_argument(_substitute(a, sub)) for a in s) for s in spelled]
    _, names, _ = conv.template_header(g)
    if any(set(re.findall(r"\b[A-Za-z_]\w*\b", a)) & (set(names) - set(knames)) for s in found for a in s):
        return None  # a name left unresolved (g called from itself)
    return sorted(dict.fromkeys(found), key=lambda s: -len(s))


def _split_callees(conv: Converter, kernels: list[Func]) -> set[str]:
    """Template device functions with static __shared__ that some kernel calls at more than one instantiation:
    each instantiation gets its own layout member, reached through an accessor (the clone serves every kernel)."""
    out: set[str] = set()
    for f in kernels:
        reach = conv.reach(f)
        for g in reach:
            if g.is_template and g.shared and g.cursor.get_usr() not in out and _accessor_params(conv, g):
                lists = _template_arg_lists(conv, f, reach, g)
                if lists is not None and len(lists) > 1:
                    out.add(g.cursor.get_usr())
    return out


def _plain_argument(a: str) -> str:
    """A template argument with its spacing collapsed and a name or number unparenthesised (`( 8 )` is `8`)."""
    a = " ".join(a.split())
    m = re.fullmatch(r"\(\s*([\w.:]+)\s*\)", a)
    return m.group(1) if m else a


def _substitution(g: Func, names: list[str], args: tuple[str, ...]) -> dict[str, str]:
    """g's template parameter names -> the arguments of one instantiation (a value parenthesised, a type not)."""
    types = {ch.spelling for ch in g.cursor.get_children() if ch.kind == K.TEMPLATE_TYPE_PARAMETER}
    return {n: a if n in types else f"({a})" for n, a in zip(names, args)}


def _substitute(text: str, sub: dict[str, str]) -> str:
    return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: sub.get(m.group(0), m.group(0)), text)


def _instantiated_decls(conv: Converter, kernel: Func, reach: list[Func], g: Func,
                        v: SharedVar) -> list[tuple[tuple[str, ...], SharedVar]] | None:
    """A template callee's __shared__ variable at each explicit instantiation the kernel's functions call, with its
    template parameters replaced by that instantiation's arguments (`matrixMul<8, size_t>(...)` makes `float
    As[block_size][block_size]` `float As[8][8]`), in its declaration and in the local constants it names; arguments
    may name the template parameters of a template kernel (LeetCUDA's `block_reduce_sum_f32<NUM_THREADS>(v)` in
    `template <int NUM_THREADS> __global__ ...`): the layout struct is a template over those. CUDA gives each
    instantiation its own array, so two instantiations are two layout members. None when a call deduces its
    arguments, or a list is shorter than the parameters (defaults) while the declaration depends on them."""
    _, names, _ = conv.template_header(g)
    lists = _template_arg_lists(conv, kernel, reach, g)
    if not lists or not names:
        return None
    out: list[tuple[tuple[str, ...], SharedVar]] = []
    for args in lists:
        if len(args) != len(names) and (v.size is None or v.consts):
            return None
        sub = _substitution(g, names, args)
        out.append((args, dataclasses.replace(v, decl_text=_substitute(v.decl_text, sub),
                                              consts=tuple((n, _substitute(t, sub)) for n, t in v.consts))))
    if len({d.consts for _, d in out}) > 1:
        return None  # the layout struct holds one constant of each name
    return out


def _accessor_params(conv: Converter, g: Func) -> list[tuple[str, bool]] | None:
    """g's template parameters as (name, is a type), when a layout accessor can take them all explicitly (no
    pack, no template template parameter, every one named)."""
    text, _, _ = conv.template_header(g)
    params = [(ch.spelling, ch.kind == K.TEMPLATE_TYPE_PARAMETER) for ch in g.cursor.get_children()
              if ch.kind in (K.TEMPLATE_TYPE_PARAMETER, K.TEMPLATE_NON_TYPE_PARAMETER, K.TEMPLATE_TEMPLATE_PARAMETER)]
    if not params or "..." in text or any(not n for n, _ in params) or \
            any(ch.kind == K.TEMPLATE_TEMPLATE_PARAMETER for ch in g.cursor.get_children()):
        return None
    return params


# what a layout accessor's type comparison needs (NVRTC has no <type_traits>): once per converted file
SAME_TYPE = ("#ifndef RT_SAME_TYPE_DEFINED\n#define RT_SAME_TYPE_DEFINED\n"
             "template <class __rt_A, class __rt_B> struct __rt_same_type { static constexpr bool value = false; };\n"
             "template <class __rt_A> struct __rt_same_type<__rt_A, __rt_A> { static constexpr bool value = true; };\n"
             "#endif\n")


def _accessor(params: list[tuple[str, bool]], name: str, insts: list[tuple[tuple[str, ...], str]]) -> str:
    """A member function template of the layout struct returning the member of one instantiation of a template
    callee's __shared__ variable: `blockReduce__shared_val<F>()`; the clone (one for every kernel) calls it with its
    own template parameters. Conditions compare the instantiation's arguments (a longer list first)."""
    header = "template <" + ", ".join(f"class __rt_p{k}" if is_type else f"auto __rt_p{k}"
                                      for k, (_, is_type) in enumerate(params)) + ">"
    body = ""
    for args, member in insts[:-1]:
        conds = [f"__rt_same_type<__rt_p{k}, {a}>::value" if params[k][1] else f"(__rt_p{k}) == ({a})"
                 for k, a in enumerate(args) if a]
        body += f"if constexpr ({' && '.join(conds) or 'true'}) return {member}; else "
    return f"{header} __device__ auto& {name}() {{ {body}return {insts[-1][1]}; }}"


def _mixed_candidates(conv: Converter, funcs: list[Func]) -> list[tuple[str, int, str]]:
    """Dependent calls with candidates that need the rTask context and candidates that do not: renamed to the
    clones, the call could no longer reach the latter (they have none), so it is refused rather than half done."""
    out: list[tuple[str, int, str]] = []
    for g in funcs:
        by_call: dict[int, list[Func]] = {}
        for c, usr in g.calls:
            if usr in conv.funcs:
                by_call.setdefault(c.extent.start.offset, []).append(conv.funcs[usr])
        for off, cands in by_call.items():
            if len({conv.needs_ctx(h) for h in cands}) > 1:
                out.append((g.file.path if g.file else "", off, f"call to {cands[0].name}: some of its candidates "
                            "need the rTask context and some do not, so the call cannot name their clones"))
    return out


def _context_reason(conv: Converter, g: Func, seen: set[str] | None = None) -> str:
    """What makes g need the rTask context (for a refusal), itself or through a callee."""
    seen = set() if seen is None else seen
    seen.add(g.cursor.get_usr())
    own = ["the legacy thread/block indices" if g.uses_indices else "",
           "static __shared__ memory" if g.shared or g.global_shared else "",
           g.barrier_sites[0][1] if g.barrier_sites else "",
           conv.call_name(g.warp_sites[0]) if g.warp_sites else "",
           "cooperative groups" if g.cg_calls or g.cg_types else ""]
    found = next((w for w in own if w), "")
    for _, usr in g.calls:
        h = conv.funcs.get(usr)
        if not found and h is not None and usr not in seen and conv.needs_ctx(h):
            found = f"{_context_reason(conv, h, seen)} (through {h.name})"
    return found


def _uncloneable_members(conv: Converter, funcs: list[Func]) -> list[tuple[str, int, str]]:
    """Calls of a .cu class's operator, constructor or destructor that needs the rTask context: most are called
    without an argument list of their own (`a + b`, a conversion, a declaration), so there is nowhere to pass the
    rTask; they are refused at the call (named member functions are cloned)."""
    out: list[tuple[str, int, str]] = []
    for g in funcs:
        for c, usr in g.calls:
            h = conv.funcs.get(usr)
            if h is None or h.member is None or not conv.needs_ctx(h):
                continue
            if h.member in (K.CONSTRUCTOR, K.DESTRUCTOR, K.CONVERSION_FUNCTION) or h.name.startswith("operator"):
                what = {K.CONSTRUCTOR: "constructor", K.DESTRUCTOR: "destructor"}.get(h.member, "operator")
                out.append((g.file.path if g.file else "", c.extent.start.offset,
                            f"{what} '{h.qualname}' uses {_context_reason(conv, h)}: operators, constructors and "
                            "destructors are not given a clone that takes the rTask (named member functions are)"))
    return out


def _top_level_start(c: ci.Cursor) -> int:
    """Offset of the file-scope declaration that holds c (its namespace, its linkage specification)."""
    while c.lexical_parent is not None and c.lexical_parent.kind != K.TRANSLATION_UNIT:
        c = c.lexical_parent
    return c.extent.start.offset


def _callees_first(funcs: list[Func], conv: Converter) -> list[Func]:
    """funcs ordered so that each follows those of them it calls (a clone must be declared before its callers)."""
    wanted = {g.cursor.get_usr() for g in funcs}
    out: list[Func] = []
    seen: set[str] = set()

    def visit(g: Func) -> None:
        key = g.cursor.get_usr()
        if key in seen:
            return
        seen.add(key)
        for h in conv.reach(g):
            if h.cursor.get_usr() in wanted:
                visit(h)
        out.append(g)
    for g in funcs:
        visit(g)
    return out


def _member_names(conv: Converter, f: Func, reach: list[Func], insts: dict[tuple[str, str], list],
                  split: set[str]) -> tuple[dict, list[SharedVar], list[str]]:
    """Layout struct members: the kernel's own shared variables, then its callees' (a template callee's at each
    instantiation the kernel calls: `insts`; of a callee in `split`, one member per instantiation and an accessor
    template, the third list), then file-scope ones."""
    members: dict = {}
    order: list[SharedVar] = []
    accessors: list[str] = []
    used: set[str] = set()

    def add(key: tuple[str, str], v: SharedVar, base: str) -> str:
        name, n = base, 1
        while name in used:
            name, n = f"{base}_{n}", n + 1
        used.add(name)
        members[key] = name
        decl = re.sub(r"\b" + re.escape(v.member) + r"\b", name, v.decl_text, count=1)
        order.append(SharedVar(v.name, name, decl, v.volatile, v.size, v.align, v.stmt, v.consts))
        return name
    for v in f.shared:
        add((f.qualname, v.name), v, v.name)
    for g in reach:
        for v in g.shared:
            decls = insts.get((g.qualname, v.name)) or [((), v)]
            base = f"{g.name}__{v.name}"
            params = _accessor_params(conv, g) if g.cursor.get_usr() in split else None
            if params is None:
                add((g.qualname, v.name), decls[0][1], base)
                continue
            names = [add((g.qualname, f"{v.name}#{k}"), d, f"{base}__{k}") for k, (_, d) in enumerate(decls)]
            accessors.append(_accessor(params, base, [(a, n) for (a, _), n in zip(decls, names)]))
    globals_used = set(f.global_shared).union(*[g.global_shared for g in reach]) if reach else set(f.global_shared)
    for name in sorted(globals_used):
        add(("", name), conv.global_shared[name], name)
    return members, order, accessors


def _convert_kernel(conv: Converter, f: Func, ctx_callees: list[Func], insts: dict[tuple[str, str], list],
                    split: set[str]) -> tuple[list[Edit], dict]:
    src, tok = conv.src, conv.tok
    clones = {g.cursor.get_usr(): g for g in ctx_callees}
    smem_callees = {u for u, g in clones.items() if conv.needs_smem(g)}
    members, order, accessors = _member_names(conv, f, ctx_callees, insts, split)
    theader, tnames, _ = conv.template_header(f)
    targs = f"<{', '.join(tnames)}>" if tnames else ""
    layout = f"{f.name}__rt_shared" if order else None
    sh_decl = f"auto& __rt_sh = *reinterpret_cast<{layout}{targs}*>(__rt.smem);" if layout else ""
    edits = conv.body_edits(f, members, clones, smem_callees, sh_decl)
    # signature: __global__ -> __device__, drop __launch_bounds__, rename, add the task parameter
    launch_bounds = None
    name_i = tok.at(f.cursor.location.offset)
    if name_i < 0:
        raise _Refuse(f.start, "cannot locate the kernel's name (declared through a macro?)")
    i = tok.first_from(f.start)
    extern_c = f.extern_c
    while i < name_i:
        s = tok.spell[i]
        if s == "__global__":
            edits.append(Edit(tok.start[i], tok.end[i], "__device__"))
        elif s == "__launch_bounds__":
            j = tok.matching(i + 1, "(", ")")
            launch_bounds = conv.raw[tok.end[i + 1]:tok.start[j]].decode().strip()
            edits.append(Edit(tok.start[i], tok.end[j], ""))  # through the ')' only: spacing and lines stay
            i = j
        i += 1
    edits.append(Edit(tok.start[name_i], tok.end[name_i], f"{f.name}__rtask"))
    lp = conv._paren_after_name(f)
    rp = tok.matching(lp, "(", ")")
    params = [c for c in f.cursor.get_children() if c.kind == K.PARM_DECL]
    edits.append(_task_parameter(tok, lp, "rt::Task& __rt", bool(params)))
    # an unnamed parameter (llm.c's `std::bool_constant<Atomic>` tag) gets a name in the wrapper, which passes it on
    names = [p.spelling or f"__rt_arg{k}" for k, p in enumerate(params)]
    raw_params = bytearray(conv.raw[tok.end[lp]:tok.start[rp]])
    for k in reversed(range(len(params))):
        if not params[k].spelling:
            at = params[k].extent.end.offset - tok.end[lp]
            raw_params[at:at] = f" {names[k]}".encode()
    param_text = raw_params.decode()
    # layout struct before the kernel, wrapper after it
    line, col = src.location(f.start)
    fname = src.filename
    if layout:
        consts = dict(c for m in order for c in m.consts)
        members_text = " ".join([*consts.values(), *(f"{m.decl_text};" for m in order), *accessors])
        struct = f"struct {layout} {{ {members_text} }};"
        if f.extern_c and accessors:  # after `extern "C"`: member templates cannot have C linkage
            struct = f'extern "C++" {{ {struct} }}'
        pre = ("\n" if col != 1 else "") + (theader + " " if theader else "") + f"{struct}\n#line {line} \"{fname}\"\n"
        if col != 1:
            pre += " " * (col - 1)
        edits.append(Edit(f.start, f.start, pre))
    argnames = ", ".join(names)
    lb = f"__launch_bounds__({launch_bounds}) " if launch_bounds else ""
    # raw bytes, not the struct: a member with a constructor (cuda::barrier) would make the __shared__ variable
    # dynamically initialised, which CUDA does not do (nvcc warning #20054); init() sets such members up
    sh_decl = (f"__shared__ __align__(alignof({layout}{targs})) unsigned char __rt_sh[sizeof({layout}{targs})]; "
               if layout else "")
    sh_ptr = "__rt_sh" if layout else "(char*)0"
    wrapper = (f"\n// rtransform: plain launch of {f.name}__rtask, one legacy block per rTask\n"
               + (theader + "\n" if theader else "")
               + ('extern "C" ' if extern_c else "")
               + f"__global__ void {lb}{f.name}({param_text}) {{\n  {sh_decl}\n"
               f"  RT_RUN_AS_KERNEL({sh_ptr}, ({f.name}__rtask{targs}(__rt{', ' if params else ''}{argnames})));\n}}"
               + _resume_line(conv, f.end))
    edits.append(Edit(f.end, f.end, wrapper))
    tparams = [TemplateParam(c.spelling, "type", None) if c.kind == K.TEMPLATE_TYPE_PARAMETER
               else TemplateParam(c.spelling, "value", c.type.spelling)
               for c in f.cursor.get_children()
               if c.kind in (K.TEMPLATE_TYPE_PARAMETER, K.TEMPLATE_NON_TYPE_PARAMETER)]
    features = set(f.features)
    for g in ctx_callees:
        features |= g.features
    if len(tparams):
        features.add("template")
    if launch_bounds:
        features.add("launch_bounds")
    if extern_c:
        features.add("extern_c")
    if "::" in f.qualname:
        features.add("namespace")
    if f.uses_indices or any(g.uses_indices for g in ctx_callees):
        features.add("indices")
    barrier_sites = []
    for g in [f] + ctx_callees:
        for off, kind in g.barrier_sites:
            ln, cl = src.location(off)
            barrier_sites.append(BarrierSite(ln, cl, kind, g.qualname))
    meta = RKernelMeta(
        name=f.qualname,
        rkernel=f"{f.name}__rtask",
        wrapper=f.name,
        layout=layout,
        params=[Param(n, p.type.spelling) for n, p in zip(names, params)],
        template_params=tparams,
        static_smem_bytes=_layout_bytes(order),
        shared_variables=[SharedVariable(m.member, m.decl_text, m.size) for m in order],
        dynamic_smem=bool(f.extern_shared or any(g.extern_shared for g in ctx_callees)),
        barrier_sites=barrier_sites,
        features=sorted(features),
        launch_bounds=launch_bounds,
        callees_cloned=[g.qualname + "__rt" for g in ctx_callees],
        warnings=[],
        source=SourceLocation(src.filename, line),
    )
    return edits, meta


def _clone_text(conv: Converter, g: Func, clones: dict[str, Func], smem_callees: set[str], split: set[str],
                at: int | None = None) -> str:
    """A copy of a device function that takes the rTask context (and the layout, if it uses shared memory).
    A local header's function is copied from the header, inside its namespaces, to go at `at` in the main file."""
    with conv.reading(g):
        body, line, col = _clone_body(conv, g, clones, smem_callees, split)
    path = (g.file or conv.main).path
    spaces = []
    p = g.cursor.semantic_parent
    while g.file is not None and p is not None and p.kind == K.NAMESPACE:
        spaces.insert(0, p.spelling)
        p = p.semantic_parent
    opening = "".join(f"namespace {n} {{ " if n else "namespace { " for n in spaces)
    return (f"\n// rtransform: {g.name} with the rTask context\n#line {line} \"{path}\"\n{opening}{' ' * (col - 1)}"
            f"{body}{' }' * len(spaces)}" + _resume_line(conv, g.end if at is None else at))


def _clone_body(conv: Converter, g: Func, clones: dict[str, Func], smem_callees: set[str],
                split: set[str]) -> tuple[str, int, int]:
    """The clone's text in g's own file, and the (line, col) where g starts (a callee in `split` reaches each of
    its __shared__ variables through the layout's accessor, at its own template arguments)."""
    tok = conv.tok
    needs_sh = g.cursor.get_usr() in smem_callees
    params = _accessor_params(conv, g) if g.cursor.get_usr() in split else None
    targs = f"<{', '.join(n for n, _ in params)}>()" if params else ""
    members = {(g.qualname, v.name): f"{'template ' if params else ''}{g.name}__{v.name}{targs}" for v in g.shared}
    members.update({("", n): n for n in g.global_shared})
    edits = conv.body_edits(g, members, clones, smem_callees)
    name_i = tok.at(g.cursor.location.offset)
    edits.append(Edit(tok.start[name_i], tok.end[name_i], f"{g.name}__rt"))
    lp = conv._paren_after_name(g)
    params = [c for c in g.cursor.get_children() if c.kind == K.PARM_DECL]
    extra = "rt::Task& __rt" + (", __RtL& __rt_sh" if needs_sh else "")
    edits.append(_task_parameter(tok, lp, extra, bool(params)))
    if needs_sh or g.generic_group:
        edits.append(_layout_parameter(tok, g.start, g.is_template, needs_sh, g.generic_group))
    line, col = conv.file.location(g.start)
    return _apply_range(conv.raw, edits, g.start, g.end), line, col


def _clone_declaration(conv: Converter, decl: ci.Cursor, g: Func, needs_sh: bool, at: int) -> str:
    """A declaration of g's clone to follow a forward declaration of g (`__device__ float bump(float);`), so that
    code between the declaration and g's definition can call the clone."""
    tok = conv.tok
    start, end = decl.extent.start.offset, decl.extent.end.offset
    name_i = tok.at(decl.location.offset)
    lp = name_i
    while lp < len(tok.spell) and tok.spell[lp] != "(":
        lp += 1
    has_params = any(c.kind == K.PARM_DECL for c in decl.get_children())
    extra = "rt::Task& __rt" + (", __RtL& __rt_sh" if needs_sh else "")
    edits = [Edit(tok.start[name_i], tok.end[name_i], f"{g.name}__rt"), _task_parameter(tok, lp, extra, has_params)]
    if needs_sh or g.generic_group:
        edits.append(_layout_parameter(tok, start, g.is_template, needs_sh, g.generic_group))
    for j in range(tok.first_from(start), len(tok.spell)):  # `thread_group g` of the declaration: the clone's
        if tok.start[j] >= end:
            break
        if g.generic_group and tok.spell[j] == "thread_group":
            edits.append(Edit(tok.start[tok.qualified_start(j)], tok.end[j], GROUP_PARAM))
    line, col = conv.src.location(start)
    text = _apply_range(conv.raw, edits, start, end)
    return f"\n#line {line} \"{conv.src.filename}\"\n{' ' * (col - 1)}{text};" + _resume_line(conv, at)


def _task_parameter(tok: _Tokens, lp: int, text: str, has_params: bool) -> Edit:
    """The task (and layout) parameters put first in a parameter list; a C-style `(void)` list is replaced."""
    if not has_params and lp + 2 < len(tok.spell) and tok.spell[lp + 1] == "void" and tok.spell[lp + 2] == ")":
        return Edit(tok.start[lp + 1], tok.end[lp + 1], text)
    return Edit(tok.end[lp], tok.end[lp], text + (", " if has_params else ""))


def _layout_parameter(tok: _Tokens, start: int, is_template: bool, layout: bool = True,
                      group: bool = False) -> Edit:
    """The clone's `class __RtL` template parameter (the type of the layout it is passed) and/or `class __RtG` (the
    rTask group a `thread_group` parameter is passed): added to the function's own `template <...>` head, the last
    of those leading its declaration (`template <class T> template <int N> void S<T>::f()` has its class's first),
    or a new head after them."""
    names = ", ".join(n for n, on in (("class __RtL", layout), (f"class {GROUP_PARAM}", group)) if on)
    i, last = tok.at(start), -1
    while 0 <= i < len(tok.spell) - 1 and tok.spell[i] == "template" and tok.spell[i + 1] == "<":
        last = tok.matching(i + 1, "<", ">")
        i = last + 1
    if is_template and last >= 0 and tok.spell[last - 1] != "<":
        return Edit(tok.start[last], tok.start[last], f", {names}")
    at = tok.end[last] if last >= 0 else start
    return Edit(at, at, (" " if last >= 0 else "") + f"template <{names}> ")


def _after_semicolon(conv: Converter, decl: ci.Cursor) -> int:
    """Offset just past the `;` that ends a declaration (its extent stops before it)."""
    i = conv.tok.first_from(decl.extent.end.offset)
    return conv.tok.end[i] if i < len(conv.tok.spell) and conv.tok.spell[i] == ";" else decl.extent.end.offset


def _resume_line(conv: Converter, offset: int) -> str:
    """Text that ends generated code inserted at `offset` (just after a function's closing brace) so that the
    source text following `offset` keeps its real line and column.

    `#line N` numbers the line AFTER the directive, so the directive names the line of `offset` and is followed
    by a newline and padding up to the column of `offset`: whatever followed the brace on its line (a comment,
    another declaration) stays at line N, and the original newline then starts line N + 1.
    """
    line, col = conv.src.location(offset)
    nl = conv.raw.find(b"\n", offset)
    rest = conv.raw[offset:nl if nl >= 0 else len(conv.raw)]
    pad = " " * (col - 1) if rest.strip() else ""
    return f"\n#line {line} \"{conv.src.filename}\"\n{pad}"


def convert_file(path: str, kernels: list[str] | None = None, strict: bool = False,
                 flags: CompileFlags | None = None) -> ConversionResult:
    """Read and convert a file; a missing or unreadable file is a ConversionError."""
    if not os.path.isfile(path):
        raise ConversionError([f"{path}:1:1: error: no such file"])
    with open(path, "rb") as fh:
        text = source_text(fh.read())
    if "\x00" in text:
        raise ConversionError([f"{path}:1:1: error: binary file: not a CUDA/C++ source"])
    return convert_source(text, path, kernels, strict, flags=flags)
