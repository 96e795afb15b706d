#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then `import wbaudit` from there with the module's interpreter and no
# PYTHONPATH into the build tree (issue 31: the install stripped the extension's RUNPATH, and the import failed with
# "libkokkoscore.so.3.4: cannot open shared object file"); the installed wbaudit executable runs too.
#   install_test.sh BUILD_DIR PYTHON SITE_DIR(relative to the prefix)
set -uo pipefail
build=$1; python=$2; site=$3
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cmake --install "$build" --prefix "$prefix" > "$prefix/install.log" 2>&1 || { cat "$prefix/install.log"; fail "cmake --install"; }
[ -f "$prefix/$site/wbaudit/__init__.py" ] || fail "the package is not under $prefix/$site"
out=$(cd / && env -u PYTHONPATH PYTHONPATH="$prefix/$site" "$python" -c \
  'import wbaudit, numpy; print(wbaudit.__file__); print(wbaudit.round(numpy.array([1.1], dtype=numpy.float32), "e4m3")[0])' 2>&1) \
  || fail "import from the installed prefix: $out"
echo "$out" | grep -q "^$prefix/$site/wbaudit/__init__.py$" || fail "imported another wbaudit: $out"
echo "$out" | grep -q "^1.125$" || fail "round(1.1, e4m3) from the installed module: $out"
"$prefix/bin/wbaudit" formats > /dev/null || fail "the installed executable does not run"
echo "install: import wbaudit and wbaudit formats work from $prefix"
