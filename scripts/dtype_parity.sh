#!/usr/bin/env bash
# The parity of bfloat16 against float32 that `--dtype auto` reads on a CPU (issue 36): the same
# grids through the default model in both dtypes, into one results file, then the verdict
# (ctxbench/model/dtype_parity.json) computed from it. Each grid is timed.
#
#   scripts/dtype_parity.sh                       # writes results/dtype-parity-smollm2.csv
#   PYTHON=.venv/bin/python scripts/dtype_parity.sh
#
# About 20 minutes on a 2-core Xeon with AMX (RULER's niah decodes up to 128 tokens a trial,
# 10-20 s each in float32: its grid is the smallest). Environment: PYTHON (default python3), OUT_CSV.
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CSV=${OUT_CSV:-results/dtype-parity-smollm2.csv}
for dtype in float32 bfloat16; do
    for grid in "ppl --method none,yarn --len 1k,2k,4k --docs 4" \
                "niah --variant single_1 --method none,yarn --len 2k --trials 10" \
                "passkey --method none --len 2k,4k --trials 4"; do
        start=$(date +%s)
        # shellcheck disable=SC2086
        "$PY" -m ctxbench $grid --device cpu --dtype "$dtype" --out "$CSV" > /dev/null
        echo "$dtype: ctxbench $grid: $(( $(date +%s) - start )) s"
    done
done
"$PY" -m ctxbench.model.autodtype "$CSV" > ctxbench/model/dtype_parity.json
cat ctxbench/model/dtype_parity.json
