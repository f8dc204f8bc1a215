#!/usr/bin/env bash
# Everything GPU-side in one call (the device lease is short): the GPU tests, then both GPU
# benchmarks. Logs go to $OUT (default /tmp/minisgl-gpu); each part has its own time limit so a
# hang in one still leaves the others' results.
#   bash benchmark/run_gpu_suite.sh [tests|decode|offline ...]     (default: all three)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/minisgl-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ -d .whl ] && ! python3 -c "import zmq" 2>/dev/null; then
    # packages the GPU image lacks (pyzmq, gguf), carried as wheels
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
parts=${*:-tests decode offline}

{ nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
} 2>&1 | tee "$OUT/env.log"

for part in $parts; do
    case $part in
        tests) timeout -k 10 "${TESTS_TIMEOUT:-330}" python3 -m pytest tests/gpu -m gpu -q -s -rs -p no:cacheprovider --confcutdir=tests \
                   2>&1 | tee "$OUT/gpu_tests.log" | grep -E "logits|NCCL|passed|failed|error|Error|SKIP|FAIL" ;;
        decode) timeout -k 10 "${DECODE_TIMEOUT:-200}" python3 benchmark/gpu_decode.py 2>&1 | tee "$OUT/gpu_decode.log" ;;
        offline) timeout -k 10 "${OFFLINE_TIMEOUT:-200}" python3 benchmark/gpu_offline.py ${OFFLINE_ARGS:-} \
                     2>&1 | tee "$OUT/gpu_offline.log" ;;
        *) echo "unknown part $part (tests, decode, offline)"; exit 2 ;;
    esac
done
