#!/usr/bin/env bash
# `pip install .` from the source tree into a fresh venv (--system-site-packages: Debian's numpy and torch), offline
# (--no-index: the in-tree PEP 517 backend needs nothing from an index), reusing the already built tree through
# WBAUDIT_BUILD_DIR so nothing is rebuilt; then, from outside the repository and without PYTHONPATH, wbaudit,
# wbaudit.torch and wbaudit.distributed import from the venv and round(1.1, e4m3) gives 1.125; pip uninstall removes
# every installed file (the wheel's RECORD is right).
#   pip_install_test.sh BUILD_DIR PYTHON SOURCE_DIR
set -uo pipefail
build=$1; python=$2; src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
"$python" -m venv --system-site-packages "$tmp/venv" > "$tmp/venv.log" 2>&1 \
  || { cat "$tmp/venv.log"; fail "python -m venv (Debian: python3-venv)"; }
(cd "$tmp" && env -u PYTHONPATH WBAUDIT_BUILD_DIR="$build" "$tmp/venv/bin/python" -m pip install --no-index \
   --no-cache-dir --disable-pip-version-check "$src") > "$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; fail "pip install"; }
out=$(cd / && env -u PYTHONPATH "$tmp/venv/bin/python" -c '
import numpy, wbaudit, wbaudit.torch, wbaudit.distributed
print(wbaudit.__file__)
print(wbaudit.round(numpy.array([1.1], dtype=numpy.float32), "e4m3")[0])' 2>&1) || fail "import from the venv: $out"
echo "$out" | grep -q "^$tmp/venv/lib/python3[.0-9]*/site-packages/wbaudit/__init__.py$" || fail "imported another wbaudit: $out"
echo "$out" | grep -q "^1.125$" || fail "round(1.1, e4m3) from the pip-installed module: $out"
"$tmp/venv/bin/python" -m pip uninstall -y wbaudit > "$tmp/uninstall.log" 2>&1 || { cat "$tmp/uninstall.log"; fail "pip uninstall"; }
left=$(find "$tmp"/venv/lib/python3*/site-packages -path '*wbaudit*' -not -name '*.pyc' -not -type d)
[ -z "$left" ] || fail "pip uninstall left $left"
echo "pip install: import wbaudit works from a venv ($tmp/venv), without PYTHONPATH"
