#!/usr/bin/env bash
# kernels/ on a CUDA GPU: correctness tests, then the bench table.
#
# One prepared script for a machine with a CUDA GPU and a Python that already
# has torch (CUDA build), triton and pytest. It installs nothing. Run from
# anywhere:
#
#   bash benchmarks/kernels_gpu.sh                # .venv/bin/python if present, else python3
#   PYTHON=/opt/conda/bin/python bash benchmarks/kernels_gpu.sh
#   OUT=/tmp/kgpu DTYPE=float16 bash benchmarks/kernels_gpu.sh
#
# Steps: (1) environment report; (2) pytest tests/kernels with RSI_REQUIRE_CUDA=1
# (the CPU tests, plus test_cuda.py: every CUDA variant, the Triton kernel
# included, through the correctness gate on the GPU); (3) python -m kernels.bench
# on the GPU, table on stdout, rows in $OUT/kernels_gpu.json; (4) the issue's
# target: the Triton RoPE above 70% of measured copy bandwidth on the large
# (prefill) shapes. Exit status: 0 all passed; 1 tests failed; 2 no GPU or a
# missing package; 3 bench failed; 4 target missed (everything else passed).
set -uo pipefail
cd "$(dirname "$0")/.."

if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3; fi
OUT="${OUT:-$(mktemp -d /tmp/kernels-gpu.XXXXXX)}"
mkdir -p "$OUT"
DTYPE="${DTYPE:-bfloat16}"
# a fresh tuning cache, so the run tunes and gates from scratch
export RSI_KERNELS_CACHE="${RSI_KERNELS_CACHE:-$OUT/autotune.json}"
export RSI_REQUIRE_TORCH=1 RSI_REQUIRE_CUDA=1
export PYTHONUNBUFFERED=1

log() { printf '\n== %s ==\n' "$*"; }

log "environment"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory --format=csv
"$PY" - <<'EOF' || { echo "FAILED: this Python cannot run the GPU checks (see above)"; exit 2; }
import importlib.util, sys
import torch
print(f"python {sys.version.split()[0]}  torch {torch.__version__}  cuda {torch.version.cuda}")
if not torch.cuda.is_available():
    sys.exit("no CUDA device visible to torch")
print(f"gpu {torch.cuda.get_device_name(0)}")
for mod in ("triton", "pytest"):
    if importlib.util.find_spec(mod) is None:
        sys.exit(f"{mod} is not installed (this script installs nothing)")
import triton
print(f"triton {triton.__version__}")
EOF
echo "output: $OUT   cache: $RSI_KERNELS_CACHE"

log "correctness: pytest tests/kernels (CPU tests + test_cuda.py on the GPU)"
if ! "$PY" -m pytest tests/kernels -q -p no:cacheprovider 2>&1 | tee "$OUT/pytest.txt"; then
  echo "FAILED: correctness tests (log: $OUT/pytest.txt)"
  exit 1
fi

log "bench: python -m kernels.bench --device cuda --dtype $DTYPE"
if ! "$PY" -m kernels.bench --device cuda --dtype "$DTYPE" --json "$OUT/kernels_gpu.json" \
      2> "$OUT/bench.log" | tee "$OUT/kernels_gpu.txt"; then
  tail -30 "$OUT/bench.log"
  echo "FAILED: bench (log: $OUT/bench.log)"
  exit 3
fi

log "target: Triton RoPE >= 70% of copy bandwidth on prefill shapes"
"$PY" - "$OUT/kernels_gpu.json" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
tri = [r for r in rows if r["op"] == "rope" and r["variant"] == "triton" and r["shape"].startswith("prefill")]
if not tri:
    sys.exit("no Triton RoPE rows: was the kernel gated out? see the table above")
worst = min((r["bandwidth_fraction"] or 0.0) for r in tri)
for r in tri:
    frac = r["bandwidth_fraction"]
    print(f"  {r['shape']:<60} {'gate failed' if frac is None else f'{frac * 100:.1f}% of copy'}"
          f"  speedup {r['speedup'] or 0:.2f}x")
print(f"worst: {worst * 100:.1f}%  ->  {'MET' if worst >= 0.70 else 'MISSED'}")
sys.exit(0 if worst >= 0.70 else 4)
EOF
status=$?
echo "table: $OUT/kernels_gpu.txt   rows: $OUT/kernels_gpu.json"
exit $status
