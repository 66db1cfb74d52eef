"""The CUDA device API surface the parse prelude and the emulator cover, as one data table.

Each row names a device function (or type), the signature exercised, where the emulator implements it, and a
test: a C++ expression evaluated by every thread of a small launch and the numpy expression that gives its
known result (or, for atomics, a statement every thread runs on one slot and the slot's known final value).
A gap is one row: tests/test_device_api.py converts one kernel holding every row (the prelude must declare
them), runs it on the emulator against the numpy column, and verifies the converted kernel; docs/DEVICE_API.md is
`markdown()` of this table.

Test variables, per thread: g (global linear id, 0..THREADS-1), lane (g % 32), x (float32 in [-2, 2)),
y (float32 in [0.5, 4)), i (int32 in [-1000, 1000)), u (uint32, any), and `tile` (cg::thread_block_tile<32>).
numpy helpers (tests/test_device_api.py): warp_* fold each warp, tile_* each group of n consecutive threads.
"""
from __future__ import annotations

from dataclasses import dataclass

BLOCK = 64
GRID = 2
THREADS = BLOCK * GRID


@dataclass(frozen=True)
class ApiRow:
    """One device API entry and its emulator test."""
    area: str
    name: str
    signature: str
    emulator: str          # the emulator header implementing it
    cu: str                # C++: an expression (value rows) or a statement on `A` (atomic rows)
    ref: str               # numpy: the expected value per thread (value rows) or the slot's final value (atomic)
    kind: str = "value"    # value | atomic
    converts: bool = True  # False: the converter refuses it inside an rKernel (see `refusal`)
    dtype: str = "float64"  # atomic rows: the slot's type (numpy name); value rows are compared as float64
    init: float = 0        # atomic rows: the slot's value before the launch
    rtol: float = 0.0

    @property
    def exact(self) -> bool:
        """Integer results and bit-level operations are compared exactly."""
        return self.rtol == 0.0


def _m(name: str, sig: str, cu: str, ref: str, rtol: float = 2e-6, area: str = "math") -> ApiRow:
    return ApiRow(area, name, sig, "emu_math.h (libm)", cu, ref, rtol=rtol)


def _i(name: str, sig: str, cu: str, ref: str) -> ApiRow:
    return ApiRow("integer intrinsics", name, sig, "emu_math.h", cu, ref)


def _f(name: str, sig: str, cu: str, ref: str, rtol: float = 2e-6) -> ApiRow:
    return ApiRow("fast-math and rounding intrinsics", name, sig, "emu_math.h", cu, ref, rtol=rtol)


def _a(name: str, sig: str, cu: str, ref: str, dtype: str, init: float = 0, rtol: float = 0.0) -> ApiRow:
    return ApiRow("atomics", name, sig, "emu_sync.h (atomics)", cu, ref, kind="atomic", dtype=dtype, init=init,
                  rtol=rtol)


def _w(name: str, sig: str, cu: str, ref: str, emulator: str = "emu_sync.h (warp)") -> ApiRow:
    return ApiRow("warp functions", name, sig, emulator, cu, ref)


def _c(name: str, sig: str, cu: str, ref: str) -> ApiRow:
    return ApiRow("cooperative groups", name, sig, "emu_cg.h", cu, ref)


ROWS: list[ApiRow] = [
    # ---- math, float and double, and the C++ overloads ---------------------------------------------------
    _m("sqrtf", "float sqrtf(float)", "sqrtf(y)", "np.sqrt(y)"),
    _m("sqrtf", "float sqrtf(float) called with an int", "sqrtf(i & 255)", "np.sqrt(i & 255)"),
    _m("rsqrtf", "float rsqrtf(float)", "rsqrtf(y)", "1 / np.sqrt(y)"),
    _m("cbrtf", "float cbrtf(float)", "cbrtf(x)", "np.cbrt(x)"),
    _m("expf", "float expf(float)", "expf(x)", "np.exp(x)"),
    _m("exp2f", "float exp2f(float)", "exp2f(x)", "np.exp2(x)"),
    _m("exp10f", "float exp10f(float)", "exp10f(x)", "10.0 ** x"),
    _m("expm1f", "float expm1f(float)", "expm1f(x)", "np.expm1(x)"),
    _m("logf", "float logf(float)", "logf(y)", "np.log(y)"),
    _m("log2f", "float log2f(float)", "log2f(y)", "np.log2(y)"),
    _m("log2f", "float log2f(float) called with an int literal", "log2f(16)", "np.full_like(x, 4.0)"),
    _m("log10f", "float log10f(float)", "log10f(y)", "np.log10(y)"),
    _m("log1pf", "float log1pf(float)", "log1pf(y)", "np.log1p(y)"),
    _m("sinf", "float sinf(float)", "sinf(x)", "np.sin(x)"),
    _m("cosf", "float cosf(float)", "cosf(x)", "np.cos(x)"),
    _m("tanf", "float tanf(float)", "tanf(x)", "np.tan(x)"),
    _m("asinf", "float asinf(float)", "asinf(x / 2)", "np.arcsin(x / 2)"),
    _m("acosf", "float acosf(float)", "acosf(x / 2)", "np.arccos(x / 2)"),
    _m("atanf", "float atanf(float)", "atanf(x)", "np.arctan(x)"),
    _m("atan2f", "float atan2f(float, float)", "atan2f(x, y)", "np.arctan2(x, y)"),
    _m("sinhf", "float sinhf(float)", "sinhf(x)", "np.sinh(x)"),
    _m("coshf", "float coshf(float)", "coshf(x)", "np.cosh(x)"),
    _m("tanhf", "float tanhf(float)", "tanhf(x)", "np.tanh(x)"),
    _m("powf", "float powf(float, float)", "powf(y, x)", "y ** x"),
    _m("fmaxf", "float fmaxf(float, float)", "fmaxf(x, y)", "np.maximum(x, y)"),
    _m("fminf", "float fminf(float, float)", "fminf(x, y)", "np.minimum(x, y)"),
    _m("fabsf", "float fabsf(float)", "fabsf(x)", "np.abs(x)"),
    _m("floorf", "float floorf(float)", "floorf(x * 3)", "np.floor(x * np.float32(3))"),
    _m("ceilf", "float ceilf(float)", "ceilf(x * 3)", "np.ceil(x * np.float32(3))"),
    _m("truncf", "float truncf(float)", "truncf(x * 3)", "np.trunc(x * np.float32(3))"),
    _m("roundf", "float roundf(float)", "roundf(x * 3)", "np.sign(x) * np.floor(np.abs(x * np.float32(3)) + 0.5)"),
    _m("rintf", "float rintf(float)", "rintf(x * 3)", "np.rint(x * np.float32(3))"),
    _m("fmodf", "float fmodf(float, float)", "fmodf(x, 0.75f)", "np.fmod(x, 0.75)"),
    _m("hypotf", "float hypotf(float, float)", "hypotf(x, y)", "np.hypot(x, y)"),
    _m("erff", "float erff(float)", "erff(x)", "np.vectorize(math.erf)(x)"),
    _m("erfcf", "float erfcf(float)", "erfcf(x)", "np.vectorize(math.erfc)(x)"),
    _m("copysignf", "float copysignf(float, float)", "copysignf(y, x)", "np.copysign(y, x)"),
    _m("fmaf", "float fmaf(float, float, float)", "fmaf(x, y, 0.5f)", "x * y + 0.5", rtol=1e-6),
    _m("ldexpf", "float ldexpf(float, int)", "ldexpf(x, 3)", "x * 8"),
    _m("sinpif", "float sinpif(float)", "sinpif(x)", "np.sin(np.pi * x)", rtol=1e-5),
    _m("normcdff", "float normcdff(float)", "normcdff(x)", "0.5 * np.vectorize(math.erfc)(-x / np.sqrt(2))"),
    _m("sqrt", "double sqrt(double)", "sqrt((double)y)", "np.sqrt(y)"),
    _m("exp", "double exp(double)", "exp((double)x)", "np.exp(x)"),
    _m("log", "double log(double)", "log((double)y)", "np.log(y)"),
    _m("pow", "double pow(double, double)", "pow((double)y, 2.5)", "y ** 2.5"),
    _m("fma", "double fma(double, double, double)", "fma((double)x, (double)y, 1.0)", "x * y + 1.0"),
    _m("exp", "float exp(float) (C++ overload)", "exp(x)", "np.exp(x)"),
    _m("abs", "float abs(float) (C++ overload)", "abs(x)", "np.abs(x)"),
    _m("abs", "int abs(int)", "abs(i)", "np.abs(i)", rtol=0.0),
    _m("llabs", "long long llabs(long long)", "llabs((long long)i * 100000)", "np.abs(i.astype(np.int64) * 100000)",
       rtol=0.0),
    _m("isnan", "bool isnan(float)", "isnan(sqrtf(x)) ? 1 : 0", "(x < 0).astype(np.int32)", rtol=0.0),
    _m("isinf", "bool isinf(float)", "isinf(x / 0.0f) ? 1 : 0", "(x != 0).astype(np.int32)", rtol=0.0),
    _m("min", "min(int, unsigned) (mixed overloads)", "min(i, 500u)", "np.minimum(i.astype(np.int64) % 2**32, 500)",
       rtol=0.0, area="min / max"),
    _m("max", "max(float, double) (mixed overloads)", "max(x, 1.0)", "np.maximum(x, 1)", area="min / max"),
    _m("min", "min(float, float)", "min(x, y)", "np.minimum(x, y)", area="min / max"),
    _m("max", "max(long long, long long)", "max((long long)i, -5ll)", "np.maximum(i, -5)", rtol=0.0,
       area="min / max"),
    _m("umin", "unsigned umin(unsigned, unsigned)", "umin(u, 123456u)", "np.minimum(u, 123456)", rtol=0.0,
       area="min / max"),
    _m("umax", "unsigned umax(unsigned, unsigned)", "umax(u & 1023u, 500u)", "np.maximum(u & 1023, 500)", rtol=0.0,
       area="min / max"),
    _m("llmin", "long long llmin(long long, long long)", "llmin((long long)i, 7ll)", "np.minimum(i, 7)", rtol=0.0,
       area="min / max"),
    _m("ullmax", "unsigned long long ullmax(unsigned long long, unsigned long long)",
       "(double)ullmax((unsigned long long)u, 3000000000ull)", "np.maximum(u, 3000000000)", rtol=0.0,
       area="min / max"),
    # ---- fast-math and rounding intrinsics ------------------------------------------------------------------
    _f("__expf", "float __expf(float)", "__expf(x)", "np.exp(x)", rtol=2e-6),
    _f("__logf", "float __logf(float)", "__logf(y)", "np.log(y)"),
    _f("__log2f", "float __log2f(float)", "__log2f(y)", "np.log2(y)"),
    _f("__log10f", "float __log10f(float)", "__log10f(y)", "np.log10(y)"),
    _f("__sinf", "float __sinf(float)", "__sinf(x)", "np.sin(x)"),
    _f("__cosf", "float __cosf(float)", "__cosf(x)", "np.cos(x)"),
    _f("__tanf", "float __tanf(float)", "__tanf(x)", "np.tan(x)"),
    _f("__powf", "float __powf(float, float) called with (int, int)", "__powf(2, i & 7)", "2.0 ** (i & 7)"),
    _f("__fdividef", "float __fdividef(float, float)", "__fdividef(x, y)", "x / y"),
    _f("__saturatef", "float __saturatef(float)", "__saturatef(x)", "np.clip(x, 0, 1)"),
    _f("__frcp_rn", "float __frcp_rn(float)", "__frcp_rn(y)", "1 / y"),
    _f("__fsqrt_rn", "float __fsqrt_rn(float)", "__fsqrt_rn(y)", "np.sqrt(y)"),
    _f("__fadd_rn", "float __fadd_rn(float, float)", "__fadd_rn(x, y)", "x + y"),
    _f("__fmul_rn", "float __fmul_rn(float, float)", "__fmul_rn(x, y)", "x * y"),
    _f("__fmaf_rn", "float __fmaf_rn(float, float, float)", "__fmaf_rn(x, y, 1.0f)", "x * y + 1"),
    _f("__float2int_rn", "int __float2int_rn(float)", "__float2int_rn(x * 10)", "np.rint(x * np.float32(10))", 0.0),
    _f("__float2int_rz", "int __float2int_rz(float)", "__float2int_rz(x * 10)", "np.trunc(x * np.float32(10))", 0.0),
    _f("__float_as_int", "int __float_as_int(float)", "__float_as_int(x)", "x.view(np.int32)", 0.0),
    _f("__int_as_float", "float __int_as_float(int)", "__int_as_float(i + 0x3f800000)",
       "(i + 0x3f800000).astype(np.int32).view(np.float32)", 0.0),
    _f("__float_as_uint", "unsigned __float_as_uint(float)", "__float_as_uint(y)", "y.view(np.uint32)", 0.0),
    # ---- integer intrinsics ---------------------------------------------------------------------------------
    _i("__popc", "int __popc(unsigned)", "__popc(u)", "np.vectorize(lambda v: bin(int(v)).count('1'))(u)"),
    _i("__popcll", "int __popcll(unsigned long long)", "__popcll(((unsigned long long)u << 32) | u)",
       "2 * np.vectorize(lambda v: bin(int(v)).count('1'))(u)"),
    _i("__clz", "int __clz(int)", "__clz((int)(u >> (g % 31)))",
       "np.vectorize(lambda v: 32 - int(v).bit_length())(u >> (g % 31))"),
    _i("__ffs", "int __ffs(int)", "__ffs((int)u)", "np.vectorize(lambda v: (int(v) & -int(v)).bit_length())(u)"),
    _i("__brev", "unsigned __brev(unsigned)", "__brev(u)", "np.vectorize(lambda v: int(f'{int(v):032b}'[::-1], 2))(u)"),
    _i("__mul24", "int __mul24(int, int)", "__mul24(i, i + 3)", "i * (i + 3)"),
    _i("__umulhi", "unsigned __umulhi(unsigned, unsigned)", "__umulhi(u, 2654435761u)",
       "(u.astype(object) * 2654435761) >> 32"),
    _i("__mulhi", "int __mulhi(int, int)", "__mulhi(i * 100000, 70000)", "(i.astype(np.int64) * 100000 * 70000) >> 32"),
    _i("__byte_perm", "unsigned __byte_perm(unsigned, unsigned, unsigned)", "__byte_perm(u, 0x11223344u, 0x5140u)",
       "(((u >> 0) & 0xff) | (((0x11223344 >> 0) & 0xff) << 8) | (((u >> 8) & 0xff) << 16)"
       " | (((0x11223344 >> 8) & 0xff) << 24))"),
    _i("__sad", "unsigned __sad(int, int, unsigned)", "__sad(i, 17, 5u)", "np.abs(i - 17) + 5"),
    _i("__funnelshift_l", "unsigned __funnelshift_l(unsigned, unsigned, unsigned)", "__funnelshift_l(u, 0xabcdefu, 8u)",
       "((0xabcdef << 8) | (u >> 24)) & 0xffffffff"),
    _i("__hadd", "int __hadd(int, int)", "__hadd(i, 999)", "(i + 999) >> 1"),
    _i("__rhadd", "int __rhadd(int, int)", "__rhadd(i, 998)", "(i + 998 + 1) >> 1"),
    # ---- C library in device code ---------------------------------------------------------------------------
    ApiRow("device C library", "NULL", "NULL", "libc <stddef.h>", "(double)(NULL == (const int*)0)",
           "np.ones_like(x)"),
    ApiRow("device C library", "memcpy", "void* memcpy(void*, const void*, size_t)", "libc",
           "[&] { float f = 0; memcpy(&f, &x, sizeof f); return f; }()", "x"),
    ApiRow("device C library", "memset", "void* memset(void*, int, size_t)", "libc",
           "[&] { unsigned w = 0; memset(&w, 0x5a, 3); return w; }()", "np.full_like(u, 0x5a5a5a)"),
    # ---- atomics: every thread applies the operation to one slot -------------------------------------------
    _a("atomicAdd", "int atomicAdd(int*, int)", "atomicAdd((int*)A, i)", "init + i.sum()", "int32", 5),
    _a("atomicAdd", "unsigned atomicAdd(unsigned*, unsigned) with an int literal", "atomicAdd((unsigned*)A, 1)",
       "init + THREADS", "uint32", 7),
    _a("atomicAdd", "unsigned long long atomicAdd(unsigned long long*, unsigned long long)",
       "atomicAdd((unsigned long long*)A, (unsigned long long)u)", "init + u.astype(np.uint64).sum()", "uint64"),
    _a("atomicAdd", "float atomicAdd(float*, float)", "atomicAdd((float*)A, 0.25f)", "init + 0.25 * THREADS",
       "float32", 1),
    _a("atomicAdd", "double atomicAdd(double*, double)", "atomicAdd((double*)A, (double)x)",
       "init + x.astype(np.float64).sum()", "float64", 0, 1e-9),
    _a("atomicAdd_block", "int atomicAdd_block(int*, int)", "atomicAdd_block((int*)A, 2)", "init + 2 * THREADS",
       "int32"),
    _a("atomicSub", "unsigned atomicSub(unsigned*, unsigned)", "atomicSub((unsigned*)A, 3u)", "init - 3 * THREADS",
       "uint32", 100000),
    _a("atomicExch", "int atomicExch(int*, int)", "if (g == 77) atomicExch((int*)A, i)", "i[77]", "int32", -1),
    _a("atomicExch", "float atomicExch(float*, float) (mixed: float slot, double value)",
       "if (g == 5) atomicExch((float*)A, 2.5)", "2.5", "float32"),
    _a("atomicExch", "unsigned long long atomicExch(unsigned long long*, unsigned long long)",
       "if (g == 9) atomicExch((unsigned long long*)A, 1ull << 40)", "2 ** 40", "uint64"),
    _a("atomicMax", "int atomicMax(int*, int)", "atomicMax((int*)A, i)", "max(init, i.max())", "int32", -5000),
    _a("atomicMax", "unsigned atomicMax(unsigned*, unsigned) with an int argument",
       "atomicMax((unsigned*)A, (int)(g * 3))", "3 * (THREADS - 1)", "uint32"),
    _a("atomicMin", "int atomicMin(int*, int)", "atomicMin((int*)A, i)", "min(init, i.min())", "int32", 5000),
    _a("atomicMin", "long long atomicMin(long long*, long long)", "atomicMin((long long*)A, (long long)i * 1000000)",
       "min(init, int(i.min()) * 1000000)", "int64", 0),
    _a("atomicMax", "unsigned long long atomicMax(unsigned long long*, unsigned long long)",
       "atomicMax((unsigned long long*)A, (unsigned long long)u << 8)", "(u.astype(np.uint64) << 8).max()", "uint64"),
    _a("atomicAnd", "unsigned atomicAnd(unsigned*, unsigned)", "atomicAnd((unsigned*)A, u | 0xffff0000u)",
       "np.bitwise_and.reduce(u | 0xffff0000) & int(init)", "uint32", 0xffffffff),
    _a("atomicOr", "int atomicOr(int*, int)", "atomicOr((int*)A, 1 << (g % 31))", "2 ** 31 - 1", "int32"),
    _a("atomicXor", "unsigned atomicXor(unsigned*, unsigned)", "atomicXor((unsigned*)A, u)",
       "np.bitwise_xor.reduce(u)", "uint32"),
    _a("atomicCAS", "int atomicCAS(int*, int, int)", "if (g == 3) atomicCAS((int*)A, 42, 7)", "7", "int32", 42),
    _a("atomicCAS", "unsigned long long atomicCAS(unsigned long long*, ...)",
       "{ unsigned long long* p = (unsigned long long*)A; unsigned long long o = *p, a;"
       " do { a = o; o = atomicCAS(p, a, a + 3); } while (o != a); }", "3 * THREADS", "uint64"),
    _a("atomicInc", "unsigned atomicInc(unsigned*, unsigned)", "atomicInc((unsigned*)A, 9u)", "THREADS % 10",
       "uint32"),
    _a("atomicDec", "unsigned atomicDec(unsigned*, unsigned)", "atomicDec((unsigned*)A, 1000u)", "500 - THREADS",
       "uint32", 500),
    # ---- warp functions ---------------------------------------------------------------------------------------
    _w("__shfl_sync", "T __shfl_sync(unsigned, T, int, int) (float)", "__shfl_sync(0xffffffffu, x, 3)",
       "x[(g // 32) * 32 + 3]"),
    _w("__shfl_xor_sync", "T __shfl_xor_sync(unsigned, T, int, int) (int)", "__shfl_xor_sync(0xffffffffu, i, 5)",
       "i[g ^ 5]"),
    _w("__shfl_down_sync", "T __shfl_down_sync(unsigned, T, unsigned, int) (double, width 16)",
       "__shfl_down_sync(0xffffffffu, (double)x, 2, 16)", "x[np.where((g % 16) + 2 < 16, g + 2, g)]"),
    _w("__shfl_up_sync", "T __shfl_up_sync(unsigned, T, unsigned, int) (unsigned)", "__shfl_up_sync(0xffffffffu, u, 1)",
       "u[np.where(lane >= 1, g - 1, g)]"),
    _w("__ballot_sync", "unsigned __ballot_sync(unsigned, int)", "__ballot_sync(0xffffffffu, x > 0)",
       "ballot(x > 0)"),
    _w("__any_sync", "int __any_sync(unsigned, int)", "__any_sync(0xffffffffu, i > 990)", "warp_any(i > 990)"),
    _w("__all_sync", "int __all_sync(unsigned, int)", "__all_sync(0xffffffffu, y > 0.4f)", "np.ones_like(x)"),
    _w("__reduce_add_sync", "unsigned __reduce_add_sync(unsigned, unsigned)",
       "__reduce_add_sync(0xffffffffu, u & 255u)", "warp_sum(u & 255)"),
    _w("__activemask", "unsigned __activemask()", "__popc(__activemask())", "np.full_like(x, 32)"),
    # ---- cooperative groups -----------------------------------------------------------------------------------
    _c("thread_block", "thread_rank(), size()", "cg::this_thread_block().thread_rank() * 1000 + "
       "cg::this_thread_block().size()", "(g % BLOCK) * 1000 + BLOCK"),
    _c("thread_block_tile<32>::shfl_xor", "T shfl_xor(T, unsigned) with T = uint4 (16 bytes)",
       "[&] { uint4 v = make_uint4(u, u + 1, u + 2, (unsigned)g); return tile.shfl_xor(v, 1).w; }()", "g ^ 1"),
    _c("thread_block_tile<32>::shfl", "T shfl(T, int) with a 24-byte struct",
       "[&] { struct S { double a, b, c; } s{x, y, (double)i}; return tile.shfl(s, 7).c; }()",
       "i[(g // 32) * 32 + 7]"),
    _c("tiled_partition<8>", "meta_group_rank(), thread_rank()",
       "[&] { auto t8 = cg::tiled_partition<8>(cg::this_thread_block()); return t8.meta_group_rank() * 8 + "
       "t8.thread_rank(); }()", "g % BLOCK"),
    _c("cg::reduce", "T reduce(const thread_block_tile<N>&, T, cg::plus<T>)",
       "cg::reduce(tile, i, cg::plus<int>())", "warp_sum(i)"),
    _c("cg::reduce", "T reduce(tile, T, cg::greater<T>)", "cg::reduce(tile, x, cg::greater<float>())",
       "warp_max(x)"),
    _c("cg::reduce", "T reduce(tile, T, Op) with a 12-byte struct and a lambda",
       "[&] { struct P { float m, s; int c; }; P r = cg::reduce(tile, P{x, 1.0f, i}, [](P a, P b) { "
       "return P{fmaxf(a.m, b.m), a.s + b.s, a.c + b.c}; }); return r.c + (int)r.s * 10000; }()",
       "warp_sum(i) + 320000"),
    _c("cg::inclusive_scan", "T inclusive_scan(const thread_block_tile<N>&, T)", "cg::inclusive_scan(tile, i)",
       "warp_cumsum(i)"),
    _c("cg::exclusive_scan", "T exclusive_scan(const thread_block_tile<N>&, T)", "cg::exclusive_scan(tile, i)",
       "warp_cumsum(i) - i"),
    _c("cg::inclusive_scan", "T inclusive_scan(tile<8>, T, cg::greater<T>)",
       "cg::inclusive_scan(cg::tiled_partition<8>(cg::this_thread_block()), x, cg::greater<float>())",
       "tile_scan(x, 8, np.maximum)"),
    _c("cg::exclusive_scan", "T exclusive_scan(tile<16>, T, Op) with a lambda (rank 0 gets T())",
       "cg::exclusive_scan(cg::tiled_partition<16>(cg::this_thread_block()), u & 7u, "
       "[](unsigned a, unsigned b) { return a | b; })",
       "np.where(g % 16 == 0, 0, np.roll(tile_scan(u & 7, 16, np.bitwise_or), 1))"),
    _c("thread_block_tile<64>", "tiled_partition<64>: thread_rank(), meta_group_rank/size(), num_threads()",
       "[&] { auto t = cg::tiled_partition<64>(cg::this_thread_block()); return t.thread_rank() * 1000 + "
       "t.meta_group_rank() * 100 + t.meta_group_size() * 10 + t.num_threads() / 64; }()",
       "(g % 64) * 1000 + ((g % BLOCK) // 64) * 100 + (BLOCK // 64) * 10 + 1"),
    _c("cg::reduce", "T reduce(const thread_block_tile<64>&, T, cg::plus<T>) (two warps)",
       "cg::reduce(cg::tiled_partition<64>(cg::this_thread_block()), i, cg::plus<int>())", "tile_sum(i, 64)"),
    _c("cg::inclusive_scan", "T inclusive_scan(const thread_block_tile<64>&, T) (two warps)",
       "cg::inclusive_scan(cg::tiled_partition<64>(cg::this_thread_block()), i)", "tile_scan(i, 64, np.add)"),
    _c("cg::exclusive_scan", "T exclusive_scan(const thread_block_tile<64>&, T) (two warps)",
       "cg::exclusive_scan(cg::tiled_partition<64>(cg::this_thread_block()), i)", "tile_scan(i, 64, np.add) - i"),
    _c("tiled_partition<32>(tile<64>)", "a tile split into smaller tiles: reduce over each warp of a 64-thread tile",
       "cg::reduce(cg::tiled_partition<32>(cg::tiled_partition<64>(cg::this_thread_block())), i, cg::plus<int>())",
       "warp_sum(i)"),
    _c("thread_block_tile<64>::shfl", "T shfl(T, int) on a tile of two warps (a broadcast)",
       "cg::tiled_partition<64>(cg::this_thread_block()).shfl(x, 40)", "x[(g // 64) * 64 + 40]"),
    _c("thread_block_tile<64>::any", "int any(int), int all(int) on a tile of two warps",
       "[&] { auto t = cg::tiled_partition<64>(cg::this_thread_block()); return t.any(i > 950) * 2 + "
       "t.all(i > -990); }()", "tile_any(i > 950, 64) * 2 + tile_all(i > -990, 64)"),
    _c("thread_block_tile::ballot", "unsigned ballot(int)", "tile.ballot(i > 0)", "ballot(i > 0)"),
    _c("coalesced_threads", "coalesced_group coalesced_threads(); size(), thread_rank() in a divergent branch",
       "x > 0 ? [&] { auto a = cg::coalesced_threads(); return (int)(a.size() * 100 + a.thread_rank()); }() : -1",
       "np.where(x > 0, warp_count(x > 0) * 100 + rank_among(x > 0), -1)"),
    _c("coalesced_group::shfl", "T shfl(T, unsigned rank) over the active lanes",
       "i > 0 ? [&] { auto a = cg::coalesced_threads(); return a.shfl(i, a.size() - 1); }() : 0",
       "np.where(i > 0, last_among(i > 0, i), 0)"),
    # ---- vector types ---------------------------------------------------------------------------------------
    ApiRow("vector types", "make_float4", "float4 make_float4(float, float, float, float)", "emu_types.h",
           "make_float4(x, y, 1.0f, 2.0f).y", "y"),
    ApiRow("vector types", "make_int2", "int2 make_int2(int, int)", "emu_types.h", "make_int2(i, 3).x + 3", "i + 3"),
]


KERNEL = "device_api"
HEADER = ("#include <cooperative_groups.h>\n#include <cooperative_groups/reduce.h>\n"
          "#include <cooperative_groups/scan.h>\n#include <cstring>\nnamespace cg = cooperative_groups;\n")


def kernel_source(rows: list[ApiRow]) -> str:
    """One kernel testing `rows`: value row r writes out[r * THREADS + g]; atomic row r works on slots[r]."""
    body = []
    for r, row in enumerate(rows):
        if row.kind == "atomic":
            stmt = row.cu if row.cu.rstrip().endswith(("}", ";")) else row.cu + ";"
            body.append(f"  {{ void* A = slots + {r}; (void)A; {stmt} }}")
        else:
            body.append(f"  out[{r} * {THREADS} + g] = (double)({row.cu});")
    return (HEADER + f"__global__ void {KERNEL}(const float* X, const float* Y, const int* I, const unsigned* U, "
            "double* out, unsigned long long* slots) {\n"
            "  const unsigned g = blockIdx.x * blockDim.x + threadIdx.x;\n  const unsigned lane = g % 32;\n"
            "  (void)lane;\n  const float x = X[g], y = Y[g];\n  const int i = I[g];\n  const unsigned u = U[g];\n"
            "  auto tile = cg::tiled_partition<32>(cg::this_thread_block());\n" + "\n".join(body) + "\n}\n")


def markdown(rows: list[ApiRow] = ROWS) -> str:
    """docs/DEVICE_API.md: the table, with its coverage per area."""
    areas: dict[str, list[ApiRow]] = {}
    for row in rows:
        areas.setdefault(row.area, []).append(row)
    names = {(r.area, r.name) for r in rows}
    lines = ["# Device API surface: parse prelude and CPU emulator", "",
             "Generated from `converter/device_api.py` (do not edit by hand; `tests/test_device_api.py` checks that "
             "this file matches). Every row is a test: one kernel evaluates each row's expression on every thread "
             f"of a {GRID} x {BLOCK} launch on the emulator and compares it with the numpy column; the same kernel is "
             "converted (the parse prelude declares every row) and verified as a persistent rKernel; where nvcc is "
             "present, the legacy kernel (with CUDA's own headers) and the converted one compile for sm_90.", "",
             f"Coverage: **{len(rows)} rows, {len(names)} functions or types**, in {len(areas)} areas: "
             + ", ".join(f"{a} {len(rs)}" for a, rs in areas.items()) + ".", "",
             "Not covered yet (known gaps): `nvcuda::wmma` (issue 15); `cuda::pipeline`; texture/surface functions "
             "(refused); `printf`/`assert` (host libc on the emulator, not tested here). `cuda::barrier` is tested "
             "in tests/real_code_kernels/split_barrier.", ""]
    for area, rs in areas.items():
        lines += [f"## {area} ({len(rs)})", "", "| name | signature | emulator | test (C++) | known result (numpy) |"
                  " converts |", "|---|---|---|---|---|---|"]
        for r in rs:
            ref = r.ref if r.kind == "value" else f"slot = {r.ref} (init {r.init:g}, {r.dtype})"
            cells = [r.name, r.signature, r.emulator, r.cu, ref, "yes" if r.converts else "refused"]
            lines.append("| " + " | ".join(f"`{c}`" if i in (0, 3, 4) else c
                                           for i, c in enumerate(x.replace("|", "\\|") for x in cells)) + " |")
        lines.append("")
    return "\n".join(lines)
