#!/usr/bin/env bash
# The GPU headline, one device call of at most 7 minutes (tests/gpu/README.md). On the device:
#   bash tests/gpu/headline.sh [headline.py options]        with carry [".whl"] (bash tests/gpu/wheelhouse.sh here)
# Results land in $OUT (the device tool's folder; ./gpu-out elsewhere): results.jsonl (every row as it is
# measured), headline.log, models.log, vdevice_bench.txt, vdevice_table.md, extras.txt, summary.md.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu-out}
BUDGET=${HL_BUDGET:-420}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$OUT/headline.log" 2>&1 || { echo "headline: wheel install failed"; tail -5 "$OUT/headline.log"; exit 3; }
  export PYTHONPATH=/tmp/site:$PWD
  [ -f .whl/COMMIT ] && export HL_COMMIT=$(cat .whl/COMMIT)
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
# a compiler that never finishes costs one stage, not the call (CUDA 13.0's NVRTC hung on the interpreter on
# 2026-11-27 until the micro stage's and the model's timeouts: 380 s); the biggest interpreter compiles in < 60 s
export RAMMER_NVRTC_TIMEOUT=${RAMMER_NVRTC_TIMEOUT:-240}
# the toolkit's nvcc for the build's compile checks, when the image has one off the PATH
command -v nvcc >/dev/null || for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break; done
started=$(date +%s)
# the Python run keeps its own deadline (budget minus 15 s); the outer timeout is the backstop
timeout -k 5 "$BUDGET" python3 tests/gpu/headline.py --out "$OUT" --budget $((BUDGET - 15)) "$@" 2>&1 \
  | tee -a "$OUT/headline.log"
rc=${PIPESTATUS[0]}
echo "headline: rc=$rc after $(( $(date +%s) - started )) s; summary:"
cat "$OUT/summary.md" 2>/dev/null || python3 tests/gpu/measured_table.py "$OUT/results.jsonl" 2>&1 | tail -20
exit "$rc"
