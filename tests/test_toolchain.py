"""The bottom layer's tool facts, each in one place: the C++ splitter, refusals."""
from __future__ import annotations

import pytest

from toolchain.cxx import split_top_level
from toolchain.demangle import demangle_entry
from toolchain.refusal import Refusal, Refused, attempt


# ---- the C++ splitter --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,items", [
    ("a, b, c", ["a", "b", "c"]),
    ("f(a, b), g", ["f(a, b)", "g"]),                                  # ()
    ("x[i, j], y", ["x[i, j]", "y"]),                                  # [] (a comma expression, or C++23)
    ("{1, 2}, {3, 4}", ["{1, 2}", "{3, 4}"]),                          # {}
    ("tile<8, true>, float", ["tile<8, true>", "float"]),               # <>
    ("map<int, vector<int>>, n", ["map<int, vector<int>>", "n"]),       # >> closes two template brackets
    ("T<U<V<W, X>>>, Y<Z>", ["T<U<V<W, X>>>", "Y<Z>"]),                 # >>> closes three
    ("x >> 2, y", ["x >> 2", "y"]),                                    # >> as a shift
    ("a < b, c > d", ["a < b", "c > d"]),                              # comparisons, not brackets
    ("n<m, k", ["n<m", "k"]),                                          # a `<` nothing closes: a less-than
    ("f(i<n), j>k", ["f(i<n)", "j>k"]),                                # the `<` dies with its parenthesis
    ("a<<2, b", ["a<<2", "b"]), ("a<=b, c>=d", ["a<=b", "c>=d"]),       # shifts and comparisons
    ("p->q, r", ["p->q", "r"]),                                        # an arrow closes nothing
    ("foo<(3>2)>, z", ["foo<(3>2)>", "z"]),                             # a `>` inside () is a greater-than
    ('"a,b", \',\', 1\'000, s', ['"a,b"', "','", "1'000", "s"]),        # literals and digit separators
    ('"x\\",y", z', ['"x\\",y"', "z"]),                                # an escaped quote inside a literal
    ("dim3(N / 2, 1), 128, 0, stream", ["dim3(N / 2, 1)", "128", "0", "stream"]),
    ("(unsigned char)3, 7u", ["(unsigned char)3", "7u"]),
    ("  a ,, b , ", ["a", "b"]), ("", []),                              # stripped, empty items dropped
    ("float a[N], *b, c[2][M]", ["float a[N]", "*b", "c[2][M]"]),
])
def test_split_top_level(text, items):
    assert split_top_level(text) == items


@pytest.mark.parametrize("symbol,entry", [
    ("_Z4tileIN3foo3BarIiLi2EEELi3EEvPf", ("tile", "foo::Bar<int, 2>, 3")),   # tile<foo::Bar<int, 2>, 3>(float*)
    ("_Z6kernelIfLj256EEvPKT_PS0_i", ("kernel", "float, 256")),               # kernel<float, 256u>(...)
    ("_Z4fillIN3foo3BarIS1_IiLi1EELi2EEEEvPf", ("fill", "foo::Bar<foo::Bar<int, 1>, 2>")),  # nested
])
def test_demangle_splits_template_arguments_at_the_top(symbol, entry):
    assert demangle_entry(symbol) == entry


# ---- refusals ----------------------------------------------------------------------------------------------------
def test_refused_carries_one_refusal():
    def view(n: int) -> int:
        if n < 0:
            raise Refused(f"n = {n} is negative", by="view")
        return 2 * n

    assert attempt(lambda: view(3)) == 6
    got = attempt(lambda: view(-1))
    assert got == Refusal("n = -1 is negative", "view") and str(got) == "n = -1 is negative"
    with pytest.raises(ValueError, match="negative"):  # uncaught, it reads as the bad-input error it is
        view(-2)
