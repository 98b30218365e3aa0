#!/usr/bin/env bash
# The device check for a session lent a GPU (docs/PERFORMANCE.md, "On a GPU"), one script, each step bounded so
# that the whole ends within 9 minutes (one device call: 10 at most):
#   bash benchmarks/gpu_check.sh [LOGDIR [STEP...]]     (STEP: the names below; all by default)
# the GPU tests (pytest -m gpu), issue 50's NCCL side (bench_nccl_cost.py), then issue 41's figures
# (probe_cuda_ends.py, bench_recorder.py --device cuda). A machine without this project's dependencies installs them
# from wheels in .whl/ (cp312, downloaded where pip reaches a registry: see the device tool's README), offline.
# Every step runs whatever the one before did; each one's output goes to LOGDIR/NAME.log and to stdout.
set -u
cd "$(dirname "$0")/.."
logs=${1:-/tmp/gpu-check}
shift
only=" $* "
mkdir -p "$logs"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>&1 | tail -3
python3 - <<'EOF'
import torch
from disttrace.tracer.record import compiled
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}, NCCL "
      f"{'.'.join(map(str, torch.cuda.nccl.version()))}; the recorder's compiled part: "
      f"{'built' if compiled.hotpath else 'not built (pure Python)'}")
EOF

step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    [ "$only" = "  " ] || [[ "$only" == *" $name "* ]] || return 0
    echo "== $name (at most $limit s)"
    local t0=$SECONDS
    timeout -k 10 "$limit" "$@" 2>&1 | tee "$logs/$name.log"
    echo "== $name: exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s"
}

step gpu_tests 200 python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/record/test_gpu.py
step nccl_cost 150 python3 benchmarks/bench_nccl_cost.py --rounds 6 --repeat 2
step nccl_pieces 60 python3 benchmarks/bench_nccl_cost.py --pieces --rounds 5
step probe_cuda_ends 50 python3 benchmarks/probe_cuda_ends.py
step bench_recorder 50 python3 benchmarks/bench_recorder.py --device cuda --rounds 6
