#!/usr/bin/env bash
# wbaudit.torch_ops on a CUDA device against the C++ kernels on host copies (bench/python/device_check.py): every
# per-tensor format and policy, >= 10^6 coordinates each, then the torch path's write-back time against p.add_(u).
# Prints SKIP and exits 0 without a CUDA device. Needs the built module: PYTHONPATH=build/release/python by default
# (WBAUDIT_PYTHON_DIR=... overrides it); the interpreter is $PYTHON, else the first of /usr/bin/python3 and the
# python3 on PATH that imports torch. Extra arguments go to device_check.py (e.g. --device cpu for a dry run).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py=""
for candidate in ${PYTHON:-} /usr/bin/python3 "$(command -v python3 || true)"; do
  if [[ -n "$candidate" && -x "$candidate" ]] && "$candidate" -c "import torch" >/dev/null 2>&1; then
    py="$candidate"
    break
  fi
done
if [[ -z "$py" ]]; then
  echo "SKIP: no python3 that imports torch (tried \$PYTHON, /usr/bin/python3, python3 on PATH)"
  exit 0
fi
export PYTHONPATH="${WBAUDIT_PYTHON_DIR:-$root/build/release/python}:$root/tests/python${PYTHONPATH:+:$PYTHONPATH}"
if ! "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1 &&
  [[ " $* " != *" --device cpu "* ]]; then
  "$py" -c "import torch; print(f'SKIP: no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is' \
    ' False); wbaudit.torch_ops was not checked on an accelerator')"
  exit 0
fi
if ! "$py" -c "import wbaudit.torch_ops" 2>/dev/null; then
  echo "device_check: $py cannot import wbaudit.torch_ops with PYTHONPATH=$PYTHONPATH (build the module:" \
    "cmake --build build/release --target wbaudit_python, or set WBAUDIT_PYTHON_DIR)" >&2
  exit 1
fi
exec "$py" "$root/bench/python/device_check.py" "$@"
