#!/usr/bin/env bash
# The 16-core figures of issue 29 (items 3 and 6), on the device machine's CPUs (its GPU unused).
#
# 1. Here, in the repository's root (once): `bash pipelines/gpu_check.sh wheels` (the wheels of
#    what that machine lacks, sphdist's own among them, into wheels/, ignored by git).
# 2. There, with wheels/ carried (the device tool's `carry: ["wheels"]`):
#        SPHDIST_BENCH_COMMIT=<commit> bash pipelines/scaling_check.sh
#    installs the wheels into /tmp/site (the sphdist command into /tmp/site/bin), then
#    a. ingest at 16 cores: `ingest_benchmark.py defaults` on INGEST_N_DOCS (default 100,000)
#       synthetic JSON Lines documents -- scikit-learn's TfidfVectorizer, dask's threads, the
#       ingest's own pool of processes, the default -- within 150 s;
#    b. the scaling table: `benchmark.py scaling` at 1M documents on 16, 8, 4, 2 and 1 threads
#       and LocalClusters 4x4 and 16x1, the most cores first, in what is left of
#       SCALING_BUDGET_S (default 540 s for the whole script): a run cut short loses the
#       costliest rows only, and the table is rewritten after every run. SCALING_FIT_ARGS caps
#       the iterations (default 3: the figure is the iteration's seconds, and every run does
#       the same 3);
#    c. with BLOCKS_RESERVE_S > 0 (default 0), that many seconds kept from b for
#       `pass_blocks.py` on the same corpus: the pass on 2 and 16 threads for the block counts
#       of BLOCKS (default 32,64,128), the experiment that says how many blocks a pass should
#       offer (its JSON lines into $OUT/pass-blocks-16.jsonl).
#    d. with PROFILE_RUNS (e.g. ',--n-workers 4 --threads-per-worker 4'; runs separated by
#       commas, an empty one for the threaded default), `pass_profile.py` on the same corpus for
#       each run (3 iterations: where each pass's wall time goes), then `comm_throughput.py` (a
#       36 MB array between a LocalCluster's processes over TLS and TCP), into
#       $OUT/pass-profile-16.jsonl.
#    INGEST_N_DOCS=0 skips a.
#    Tables and JSON go to $OUT (what the device tool brings back), else pipelines/results.
set -euo pipefail
cd "$(dirname "$0")/.."
SITE=${SCALING_SITE:-/tmp/site}
OUTDIR=${OUT:-pipelines/results}
BUDGET=${SCALING_BUDGET_S:-540}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" wheels/*.whl
export PYTHONPATH="$SITE" PATH="$SITE/bin:$PATH" PYTHONUNBUFFERED=1
echo "cores $(nproc), $(python3 --version), $(grep MemTotal /proc/meminfo), load $(cat /proc/loadavg)"
python3 -c "import dask, distributed, zarr, numpy, scipy, sklearn, sphdist; print('sphdist', \
sphdist.__file__, 'dask', dask.__version__, 'zarr', zarr.__version__, 'numpy', \
numpy.__version__, 'scipy', scipy.__version__, 'sklearn', sklearn.__version__)"
sphdist --version

if [ "${INGEST_N_DOCS:-100000}" != 0 ]; then
mkdir -p "$OUTDIR/ingest16"
timeout 150 python3 pipelines/ingest_benchmark.py defaults --sizes "${INGEST_N_DOCS:-100000}" \
    --modes sklearn,threads,processes,default --workdir /tmp/ingest \
    --output-dir "$OUTDIR/ingest16" 2>&1 | tail -8 || echo "ingest ended with status $?"
fi

RESERVE=${BLOCKS_RESERVE_S:-0}
left=$((BUDGET - RESERVE - SECONDS))
echo "scaling: ${left} s left"
timeout "$left" python3 pipelines/benchmark.py scaling \
    --n-docs "${SCALING_N_DOCS:-1000000}" --threads "${SCALING_THREADS:-1,2,4,8,16}" \
    --clusters "${SCALING_CLUSTERS:-4x4,16x1}" \
    --fit-args "${SCALING_FIT_ARGS:---tol 1e-4 --seed 0 --max-iter 3}" \
    --work-dir /tmp/bench --output "$OUTDIR/scaling-16" \
    --note "Measured on the device machine's CPUs (its GPU unused) by pipelines/scaling_check.sh." \
    >/dev/null || echo "scaling ended with status $? (a time limit keeps the rows measured so far)"
cat "$OUTDIR/scaling-16.md" 2>/dev/null || true
if [ "$RESERVE" -gt 0 ]; then
    left=$((BUDGET - SECONDS))
    echo "pass_blocks: ${left} s left"
    timeout "$left" python3 pipelines/pass_blocks.py /tmp/bench/synthetic-1000k.zarr \
        --threads 16,2 --blocks "${BLOCKS:-32,64,128}" --passes 2 \
        | tee "$OUTDIR/pass-blocks-16.jsonl" || echo "pass_blocks ended with status $?"
fi
if [ -n "${PROFILE_RUNS:-}" ]; then
    IFS=',' read -r -a runs <<< "$PROFILE_RUNS"
    for run in "${runs[@]}"; do
        echo "pass_profile ${run:-threads}: $((BUDGET - SECONDS)) s left"
        rm -rf /tmp/pass-profile.zarr
        # shellcheck disable=SC2086
        timeout 120 python3 pipelines/pass_profile.py -- fit \
            --input /tmp/bench/synthetic-1000k.zarr --output /tmp/pass-profile.zarr -r 100 \
            --tol 1e-4 --seed 0 --max-iter 3 $run 2>/dev/null \
            | grep '^{' | sed "s|^{|{\"run\": \"${run:-threads}\", |" \
            | tee -a "$OUTDIR/pass-profile-16.jsonl" || echo "pass_profile ended with status $?"
    done
    timeout 90 python3 pipelines/comm_throughput.py | tee -a "$OUTDIR/pass-profile-16.jsonl" \
        || echo "comm_throughput ended with status $?"
fi
echo "scaling_check: ${SECONDS} s"
