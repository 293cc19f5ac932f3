#!/usr/bin/env bash
# The device check of issue 30 (GPU chunks), in two steps.
#
# 1. Here, on a machine with pip and the network, in the repository's root (once):
#        bash pipelines/gpu_check.sh wheels
#    downloads into wheels/ (ignored by git) the Python 3.12 x86-64 wheels of what the GPU
#    machine lacks -- the versions of .venv here -- and copies the 20 Newsgroups archive of
#    the data home (SPHDIST_DATA_HOME, default ../shared/data) to wheels/data.
# 2. There, on the GPU machine (CuPy 14 for CUDA 13, NumPy, SciPy, scikit-learn installed),
#    with wheels/ carried (the device tool's `carry: ["wheels"]`):
#        bash pipelines/gpu_check.sh
#    installs the wheels into /tmp/site, runs the tests marked gpu (tests/core/test_device.py)
#    and the benchmark (pipelines/gpu_benchmark.py -> pipelines/results/gpu.md); everything
#    ends within GPU_CHECK_BUDGET_S seconds (default 540, under the tool's 10 minutes). Logs
#    and gpu.md are also copied to $OUT when it is set (what the device tool brings back).
#    GPU_SIZES / GPU_CPU_SIZES choose the benchmark's sizes (default 1M and 10M / 1M); a size
#    that would not end within the budget is skipped and noted: run it alone in a second call.
#    Rehearsed without a GPU on Python 3.12 with only the GPU machine's packages plus wheels/
#    (a fake nvidia-smi): the install, the imports, the gpu tests (skipped) and the benchmark's
#    CPU columns ran; its GPU columns recorded "no CuPy".
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=wheels
PACKAGES=(dask distributed zarr numcodecs donfig google-crc32c partd locket tblib tornado zict
          universal_pathlib pathlib_abc click toolz cloudpickle fsspec threadpoolctl
          cryptography cffi pycparser)

if [ "${1:-run}" = wheels ]; then
    mkdir -p "$WHEELS/data"
    specs=()
    for name in "${PACKAGES[@]}"; do
        specs+=("$(.venv/bin/python -m pip freeze | grep -i "^${name//_/[-_]}==")")
    done
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -d "$WHEELS" "${specs[@]}"
    .venv/bin/python -m pip wheel -q --no-deps -w "$WHEELS" .  # sphdist's
    cp "${SPHDIST_DATA_HOME:-../shared/data}/20news-bydate.tar.gz" "$WHEELS/data/"
    du -sh "$WHEELS"
    exit 0
fi

BUDGET=${GPU_CHECK_BUDGET_S:-540}
START=$SECONDS
LOGS=${OUT:-pipelines/results}
SITE=${GPU_SITE:-/tmp/site}
mkdir -p "$LOGS"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$WHEELS"/*.whl
export PYTHONPATH="$SITE:$PWD" PYTHONUNBUFFERED=1 SPHDIST_DATA_HOME="$PWD/$WHEELS/data"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import dask, zarr, sphdist; print('dask', dask.__version__, 'zarr', zarr.__version__)"
python3 -c "import cupy; print('cupy', cupy.__version__, 'devices', \
cupy.cuda.runtime.getDeviceCount())" || echo "CuPy or its device is missing: the gpu tests skip"

# the tests marked gpu (on CI they are skipped); warnings stay warnings here
status=0
timeout 240 python3 -m pytest -q -m gpu -W default -p no:cacheprovider -rs \
    tests/core/test_device.py 2>&1 | tee "$LOGS/gpu_tests.log" || status=$?

left=$((BUDGET - (SECONDS - START) - 20))
if [ "$left" -gt 60 ]; then
    timeout "$left" python3 pipelines/gpu_benchmark.py --sizes "${GPU_SIZES:-1000000,10000000}" \
        --cpu-sizes "${GPU_CPU_SIZES:-1000000}" --budget-s "$((left - 15))" \
        --output pipelines/results/gpu.md 2>&1 | tee "$LOGS/gpu_benchmark.log" || status=$?
    [ -n "${OUT:-}" ] && cp pipelines/results/gpu.md "$OUT/" 2>/dev/null || true
else
    echo "no time left for the benchmark ($left s)"
fi
echo "gpu_check: ${SECONDS}s, status $status"
exit "$status"
