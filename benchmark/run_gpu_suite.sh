#!/usr/bin/env bash
# Everything GPU-side in one call (the device lease is short): the GPU tests, then both GPU
# benchmarks. Logs go to $OUT (default /tmp/minisgl-gpu); each part has its own time limit so a
# hang in one still leaves the others' results.
#   bash benchmark/run_gpu_suite.sh [tests|grader|flashinfer|gemv|profile|decode|offline|parallel|pp-tests|pipeline ...]
#   (default: tests decode offline; issue 18: parallel (chapter 12), pp-tests pipeline (chapter 13);
#   issue 34: prefix (chapter 11, one GPU), moe (chapter 14, two GPUs): copy their JSON from $OUT into the
#   chapter's data/ and run `python benchmark/chapter_tables.py`)
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
if [ -d .whl-flashinfer ] && ! python3 -c "import flashinfer" 2>/dev/null; then
    # the optional FlashInfer attention backend: flashinfer-python + apache-tvm-ffi, carried as wheels
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-flashinfer/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
# FlashInfer compiles its kernels with nvcc on first use; keep its JIT cache (and tvm-ffi's) in /tmp
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp} TVM_FFI_CACHE_DIR=${TVM_FFI_CACHE_DIR:-/tmp/tvm-ffi}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
parts=${*:-tests decode offline}

{ nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
} 2>&1 | tee "$OUT/env.log"

for part in $parts; do
    case $part in
        tests) timeout -k 10 "${TESTS_TIMEOUT:-330}" python3 -m pytest tests/gpu -m gpu -q -s -rs -p no:cacheprovider --confcutdir=tests \
                   --ignore=tests/gpu/test_flashinfer.py \
                   2>&1 | tee "$OUT/gpu_tests.log" | grep -E "logits|NCCL|passed|failed|error|Error|SKIP|FAIL" ;;
        grader) # the course grader with one GPU per rank (NCCL): reference answers, stubs, then its self-test
                for impl in solutions exercises; do
                    timeout -k 10 "${GRADER_TIMEOUT:-240}" python3 -m pytest exercises --impl $impl --world-sizes 2 -q \
                        -p no:cacheprovider --results "$OUT/grade_$impl.json" 2>&1 | tee "$OUT/grade_$impl.log" \
                        | grep -E "^total|passed|failed|hung|Traceback"
                done
                timeout -k 10 "${SELFTEST_TIMEOUT:-420}" python3 -m pytest tests/test_grader.py -q -p no:cacheprovider \
                    2>&1 | tee "$OUT/grader_selftest.log" | tail -3 ;;
        pp-tests) # chapter 13's GPU tests: the symmetric-memory all-reduce and pipeline stages on two GPUs
            timeout -k 10 "${PP_TESTS_TIMEOUT:-300}" python3 -m pytest tests/gpu/test_symm_allreduce.py \
                tests/gpu/test_pipeline_stages.py -m gpu -q -s -rs -p no:cacheprovider --confcutdir=tests \
                2>&1 | tee "$OUT/gpu_pp_tests.log" | grep -E "passed|failed|error|Error|SKIP|FAIL|assert" ;;
        gemv) timeout -k 10 "${GEMV_TIMEOUT:-150}" python3 benchmark/gpu_gemv.py 2>&1 | tee "$OUT/gpu_gemv.log" ;;
        profile) timeout -k 10 "${PROFILE_TIMEOUT:-120}" python3 benchmark/profile_decode.py 2>&1 | tee "$OUT/profile_decode.log" ;;
        flashinfer) python3 -c "import flashinfer; print('flashinfer', flashinfer.__version__)" 2>&1 | tail -1
                    timeout -k 10 "${FLASHINFER_TIMEOUT:-360}" python3 -m pytest tests/gpu/test_flashinfer.py -m gpu -q -s -rs \
                        -p no:cacheprovider --confcutdir=tests 2>&1 | tee "$OUT/gpu_flashinfer.log" \
                        | grep -E "flashinfer|tokens|passed|failed|error|Error|SKIP|FAIL" ;;
        decode) timeout -k 10 "${DECODE_TIMEOUT:-200}" python3 benchmark/gpu_decode.py ${DECODE_ARGS:-} 2>&1 | tee "$OUT/gpu_decode.log" ;;
        offline) timeout -k 10 "${OFFLINE_TIMEOUT:-200}" python3 benchmark/gpu_offline.py ${OFFLINE_ARGS:-} \
                     2>&1 | tee "$OUT/gpu_offline.log" ;;
        parallel)  # chapter 12's measurements on 2 GPUs: rows merged into a copy of the chapter's data file
            cp chapters/12-beyond-one-machine/data/measurements.csv "$OUT/measurements.csv"
            for experiment in "tpot --tp 1 2 --prompt-len 512 --new-tokens 128" \
                              "throughput --layouts 1x1 2x1 1x2 --requests 256 --prompt-len 512 --new-tokens 256" \
                              "comm --tp 2 --batch-sizes 1 16 64 --prompt-len 256 --new-tokens 64"; do
                timeout -k 10 "${PARALLEL_TIMEOUT:-300}" python3 benchmark/parallel_scaling.py $experiment \
                    --device cuda --dtype bfloat16 --shape llama-3.1-8b --out "$OUT/measurements.csv"
            done 2>&1 | tee "$OUT/parallel_scaling.log" ;;
        pipeline)  # chapter 13's measurements on 2 GPUs: PP 2 vs TP 2 (both without CUDA graphs, as stages
                   # run), decode step time with PyNCCL vs the symmetric-memory all-reduce (graphs on), and the
                   # counter's share of collectives with symm (chapter 12's comm rows are the PyNCCL ones)
            cp chapters/13-pipeline-parallelism/data/measurements.csv "$OUT/measurements-ch13.csv"
            for experiment in "pipeline --layouts 2x1 1x2 --eager --requests 128 --prompt-len 512 --new-tokens 128" \
                              "tpot --tp 2 --backends pynccl symm --batch-sizes 1 16 64 --prompt-len 256 --new-tokens 64" \
                              "comm --tp 2 --backends symm --batch-sizes 1 64 --prompt-len 256 --new-tokens 64"; do
                timeout -k 10 "${PIPELINE_TIMEOUT:-180}" python3 benchmark/parallel_scaling.py $experiment \
                    --device cuda --dtype bfloat16 --shape llama-3.1-8b --out "$OUT/measurements-ch13.csv"
            done 2>&1 | tee "$OUT/pipeline_scaling.log" ;;
        prefix) timeout -k 10 "${PREFIX_TIMEOUT:-240}" python3 benchmark/prefix_cache.py --device cuda --shape qwen3-0.6b \
                    --out "$OUT/prefix_cache.json" 2>&1 | tee "$OUT/prefix_cache.log" ;;
        moe) timeout -k 10 "${MOE_TIMEOUT:-540}" python3 benchmark/moe.py --device cuda --dtype bfloat16 --shape qwen3-30b-a3b \
                 --layers 16 --out "$OUT/moe-gpu.json" 2>&1 | tee "$OUT/moe.log" ;;
        *) echo "unknown part $part (tests, grader, flashinfer, gemv, profile, decode, offline, parallel, pp-tests," \
                "pipeline, prefix, moe)"
           exit 2 ;;
    esac
done
