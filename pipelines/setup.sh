#!/usr/bin/env bash
# Create (or update) the project's virtual environment in .venv and install sphdist into it
# with its test and documentation dependencies (tests/test_docs.py builds docs/). Idempotent;
# run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[test,docs]"
.venv/bin/python -c "import sphdist; print('sphdist', sphdist.__version__, 'installed in .venv')"
