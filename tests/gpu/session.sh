#!/usr/bin/env bash
# One GPU session's checks and benchmarks, in stages so each fits one device call (10 minutes):
#   tests/gpu/session.sh check    GPU-marked tests (pytest -m gpu: corpus bindings, verify kernels, measured profile)
#   tests/gpu/session.sh vdevice  vDevice DAG tests on the GPU, hand-off/barrier bench, a chain three ways
#   tests/gpu/session.sh zoo      zoo --small builds for the GPU + rammer run --check (3 policies on three models)
#   tests/gpu/session.sh bench A B ...   `rammer bench` of zoo models (JSON per model)
#   tests/gpu/session.sh models [--models a,b] [--policies p]   per-model times of built models, three executors
#   tests/gpu/session.sh sanitize compute-sanitizer racecheck/synccheck on small built models
# Results go to $OUT (or ./gpu-out). Needs CuPy, onnx, onnxruntime (and torch for the torch baselines).
# Wheels the machine lacks (libclang, pycparser, click, pyyaml, networkx, tqdm) are read from .whl/ when present.
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >/dev/null 2>&1 || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
rammer() { python3 -c "from rammer.cli import main; main()" "$@"; }
stage=${1:-check}; shift || true

case "$stage" in
check)
  nvidia-smi -L | tee "$OUT/device.txt"
  timeout 540 python3 -m pytest -q -ra -m gpu -p no:cacheprovider tests > "$OUT/pytest_gpu.log" 2>&1
  echo "pytest -m gpu rc=$?"; tail -n 25 "$OUT/pytest_gpu.log"
  ;;
vdevice)
  timeout 560 python3 tests/vdevice_gpu_bench.py --table "$OUT/vdevice_table.md" > "$OUT/vdevice_bench.txt" 2>&1
  echo "vdevice bench rc=$?"; tail -n 30 "$OUT/vdevice_bench.txt"
  ;;
zoo)
  mkdir -p /tmp/zoo
  for m in $(python3 -c "from rammer.zoo import NAMES; print(' '.join(NAMES))"); do
    rammer zoo "$m" --small -o "/tmp/zoo/$m.onnx" >/dev/null 2>&1
    policies=wavefront
    case "$m" in lstm-tc|transformer|resnext) policies="wavefront ios sequential";; esac
    for p in $policies; do
      timeout 120 bash -c "python3 -c 'from rammer.cli import main; main()' build /tmp/zoo/$m.onnx \
        -o /tmp/zoo/$m-$p --policy $p --target gpu >/dev/null 2>/tmp/zoo/err \
        && python3 -c 'from rammer.cli import main; main()' run /tmp/zoo/$m-$p --check" \
        > /tmp/zoo/log 2>&1
      echo "$m $p rc=$? $(grep -h -E 'check:|error' /tmp/zoo/log /tmp/zoo/err | head -2 | tr '\n' ' ')"
    done
  done 2>&1 | tee "$OUT/zoo_small_gpu.txt"
  ;;
bench)
  for m in "$@"; do
    timeout 280 python3 -c "from rammer.cli import main; main()" bench "$m" --json --repeats 50 \
      --out "/tmp/bench/$m" > "$OUT/bench_$m.json" 2> "$OUT/bench_$m.err"
    echo "$m rc=$?"
    for p in wavefront ios; do  # keep the timeline and report of each build, not its weights and tables
      mkdir -p "$OUT/bench_$m/$p" && cp /tmp/bench/$m/$p/{timeline.svg,report.md,build.json} "$OUT/bench_$m/$p/" 2>/dev/null
    done
    python3 - "$OUT/bench_$m.json" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("  no result:", e); raise SystemExit
for v in r["variants"]:
    print(f"  {v['name']:14s} {v['status']:11s} {v['median_ms']} ms err={v['max_err']} {v['note'][:150]}")
for p, b in r.get("builds", {}).items():
    print(f"  build {p}: {b.get('build_s')} s, {b.get('rtasks')} rTasks, {b.get('barrier_rtasks')} barriers, "
          f"predicted {b.get('predicted_us')} us, busy {b.get('predicted_busy_pct')}%, ncu {b.get('ncu')}")
EOF
    tail -n 3 "$OUT/bench_$m.err"
  done
  ;;
models)
  # per-model times of the test models and the zoo at --small, every policy (python tests/gpu/models.py --help)
  timeout 580 python3 tests/gpu/models.py --out "$OUT/models_gpu.md" "$@" 2>&1 | tee "$OUT/models_gpu.log" | tail -n 45
  ;;
sanitize)
  mkdir -p /tmp/san
  for m in transformer squeezenet; do
    rammer zoo "$m" --small -o "/tmp/san/$m.onnx" >/dev/null 2>&1
    rammer build "/tmp/san/$m.onnx" -o "/tmp/san/$m" --target gpu --veus 16 >/dev/null 2>&1
    for tool in racecheck synccheck memcheck; do
      timeout 150 compute-sanitizer --tool $tool --print-limit 5 \
        python3 -c "from rammer.cli import main; main()" run "/tmp/san/$m" --check \
        > "$OUT/sanitize_${m}_$tool.txt" 2>&1
      echo "$m $tool rc=$? $(grep -E 'ERROR SUMMARY|check:|hazard' "$OUT/sanitize_${m}_$tool.txt" | head -3 | tr '\n' ' ')"
    done
  done
  ;;
*)
  echo "unknown stage $stage"; exit 2 ;;
esac
