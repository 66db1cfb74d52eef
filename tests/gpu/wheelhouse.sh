#!/usr/bin/env bash
# Prepare the wheels the GPU machine lacks, in .whl/ (git-ignored through .git/info/exclude), for the device tool's
# `carry`. Run here, on the CPU machine, before a device session:  bash tests/gpu/wheelhouse.sh
# The device image (the device tool's KINDS.md) has Python 3.12, numpy, onnx, onnxruntime, cupy, torch, click,
# pyyaml, tqdm and networkx; it lacks libclang, simpleeval, cxxfilt and orjson. The versions are the ones installed here,
# so the device converts exactly as this machine does; orjson (toolchain/jsonio.py: the same JSON, faster) takes the
# index's newest for Python 3.12 when this machine's version has no such wheel. Also stamps .whl/COMMIT (the
# device gets no .git).
set -euo pipefail
cd "$(dirname "$0")/../.."
WANT=(libclang simpleeval cxxfilt orjson)
ANY_VERSION=" orjson "  # output-equivalent at any version
mkdir -p .whl
exclude=$(git rev-parse --git-path info/exclude 2>/dev/null || true)
if [ -n "$exclude" ] && ! grep -qx '/.whl/' "$exclude" 2>/dev/null; then
  mkdir -p "$(dirname "$exclude")" && echo '/.whl/' >> "$exclude"
fi
rm -f .whl/*.whl
for pkg in "${WANT[@]}"; do
  ver=$(python3 -m pip show "$pkg" 2>/dev/null | awk '/^Version:/{print $2}')
  [ -n "$ver" ] || { echo "wheelhouse: error: $pkg is not installed here (pip install -e . first)" >&2; exit 1; }
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux2010_x86_64 --platform manylinux1_x86_64 --platform any -d .whl "$pkg==$ver" 2>&1 \
    | grep -v -E '^(WARNING|DEPRECATION)' | { [[ "$ANY_VERSION" == *" $pkg "* ]] && cat >/dev/null || cat; } || true
  if [[ "$ANY_VERSION" == *" $pkg "* ]] && ! compgen -G ".whl/${pkg}-*.whl" >/dev/null; then
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$pkg" 2>&1 \
      | grep -v -E '^(WARNING|DEPRECATION)' || true
  fi
  compgen -G ".whl/${pkg}-*.whl" >/dev/null || { echo "wheelhouse: error: no wheel for $pkg==$ver" >&2; exit 1; }
done
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || commit="$commit+dirty"
echo "$commit" > .whl/COMMIT
wheels=$(du -cb .whl/* | tail -1 | cut -f1)
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
total=$((wheels + tree))
printf 'wheelhouse: %s\n' .whl/*.whl
printf 'wheelhouse: wheels %.1f MiB + tracked tree %.1f MiB = %.1f MiB of the 64 MiB the device tool carries\n' \
  "$(echo "$wheels/1048576" | bc -l)" "$(echo "$tree/1048576" | bc -l)" "$(echo "$total/1048576" | bc -l)"
[ "$total" -le $((64 * 1048576)) ] || { echo "wheelhouse: error: over the 64 MiB carry limit" >&2; exit 1; }
