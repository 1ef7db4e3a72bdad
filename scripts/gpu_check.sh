#!/usr/bin/env bash
# The GPU check of issue 36 in one command, for a machine with a CUDA GPU (about 8 minutes at most):
# the CUDA tests (every test with "cuda" in its name under tests/methods, tests/runner and tests/model: the kernels against the
# reference, each attention-level method's logits in float32 and bf16 against the float64 naive
# reference, the whole-sequence path against the block partition, `ctxbench ppl` end to end), then
# scripts/bench_gpu.py (Llama-3.2-1B shape, bf16, 8k-128k). Output goes to the terminal and, where
# $OUT is set, to $OUT/gpu_check.log, $OUT/cuda_tests.log (+ .xml), $OUT/bench_gpu.md and $OUT/bench_gpu.json.
#
#   scripts/gpu_check.sh --fetch-wheels   # on a machine with a package registry: the pure-Python
#                                         # dependencies a bare GPU image may lack, into .whl/
#   scripts/gpu_check.sh                  # on the GPU machine (installs .whl/ and ctxbench, no network)
#
# Environment: PYTHON (default python3), TEST_SECONDS (default 270), BENCH_SECONDS (default 200; 0 skips the bench),
# BENCH_ARGS (extra arguments for bench_gpu.py, e.g. "--shape llama3-8b --len 8k,32k").
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# transformers: the release CI tests (the GPU image may hold an older one)
WHEELS=(array-api-compat==1.16.0 transformers==5.24.0)

if [ "${1:-}" = "--fetch-wheels" ]; then
    mkdir -p .whl
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    exec "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl "${WHEELS[@]}"
fi

LOG=${OUT:-/tmp}/gpu_check.log
exec > >(tee "$LOG") 2>&1
start=$(date +%s)
echo "== gpu_check $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"

if ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# ctxbench itself, for its entry points (the task registry); the tree is on the path either way
"$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1 \
    || echo "note: pip install -e . failed; running from the tree (PYTHONPATH)"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
"$PY" - <<'EOF' || { echo "== cannot import what the check needs (see above); nothing was run"; exit 2; }
import torch, transformers, array_api_compat, ctxbench.methods.kernels  # noqa: F401
print(f"torch {torch.__version__}, transformers {transformers.__version__}, cuda {torch.cuda.is_available()}",
      torch.cuda.get_device_name() if torch.cuda.is_available() else "")
assert torch.cuda.is_available(), "no CUDA device visible"
EOF

echo "== CUDA tests (limit ${TEST_SECONDS:-270} s)"
# SIGINT at the limit: pytest stops cleanly and still writes its summary and the JUnit file
timeout -s INT "${TEST_SECONDS:-270}" "$PY" -m pytest -q -rfEs -p no:cacheprovider tests/methods tests/runner tests/model \
    -k cuda -m "not slow" -s --junitxml="${OUT:-/tmp}/cuda_tests.xml" \
    2>&1 | tee "${OUT:-/tmp}/cuda_tests.log" | grep -v "^tests/.*SKIPPED" | tail -n 120
tests=${PIPESTATUS[0]}
echo "== CUDA tests exit status $tests (124: time limit)"

if [ "${BENCH_SECONDS:-200}" = "0" ]; then  # the tests alone (a short device budget)
    echo "== bench_gpu.py skipped (BENCH_SECONDS=0); $(( $(date +%s) - start )) s in all"
    exit "$tests"
fi
echo "== bench_gpu.py (limit ${BENCH_SECONDS:-200} s)"
# shellcheck disable=SC2086
timeout "${BENCH_SECONDS:-200}" "$PY" scripts/bench_gpu.py --budget $(( ${BENCH_SECONDS:-200} - 40 )) \
    --json "${OUT:-/tmp}/bench_gpu.json" ${BENCH_ARGS:-} \
    | tee "${OUT:-/tmp}/bench_gpu.md"
bench=${PIPESTATUS[0]}
echo "== bench exit status $bench (124: time limit); $(( $(date +%s) - start )) s in all"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
