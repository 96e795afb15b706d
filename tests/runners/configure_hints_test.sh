#!/usr/bin/env bash
# docs/install.md's CMake-only recipe: configure the project (configure only) into a temporary build directory with
# every dependency given by an explicit hint (-DKokkos_DIR=, -DHDF5_ROOT=, -DMPI_C_COMPILER=, -D<Pkg>_DIR=), with
# HOME pointing at an empty directory so that the default Kokkos cache (~/.cache/wbaudit) is not there to fall back
# on; then check that the compile and link lines use the hinted Kokkos and HDF5. Without the Kokkos hint the same
# configure fails, naming Kokkos (so the hint is what found it).
#   configure_hints_test.sh SOURCE_DIR CMAKE KOKKOS_DIR HDF5_LIBRARY MPI_C_COMPILER EIGEN3_DIR BOOST_DIR \
#     NLOHMANN_JSON_DIR CLI11_DIR TOMLPLUSPLUS_DIR RANDOM123_INCLUDE_DIR GTEST_DIR
set -uo pipefail
src=$1 cmake=$2 kokkos_dir=$3 hdf5_library=$4 mpicc=$5 eigen3_dir=$6 boost_dir=$7 json_dir=$8 cli11_dir=$9
toml_dir=${10} random123=${11} gtest_dir=${12}
work=$(mktemp -d /tmp/wbaudit-configure.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$work/log" ] && tail -30 "$work/log" >&2; exit 1; }
mkdir -p "$work/home"
# The HDF5 installation root: the directory holding the library, or the one above when that is a lib/ (Debian:
# .../hdf5/serial; Spack: the prefix).
hdf5_root=$(dirname "$hdf5_library")
case $(basename "$hdf5_root") in lib | lib32 | lib64) hdf5_root=$(dirname "$hdf5_root") ;; esac
hints=(-DHDF5_ROOT="$hdf5_root" -DMPI_C_COMPILER="$mpicc" -DEigen3_DIR="$eigen3_dir" -DBoost_DIR="$boost_dir"
       -Dnlohmann_json_DIR="$json_dir" -DCLI11_DIR="$cli11_dir" -Dtomlplusplus_DIR="$toml_dir"
       -DRANDOM123_INCLUDE_DIR="$random123" -DGTest_DIR="$gtest_dir"
       -DCMAKE_BUILD_TYPE=Release -DWBAUDIT_BUILD_BENCH=OFF -DWBAUDIT_BUILD_PYTHON=OFF)
configure() {  # configure BUILD_DIR [more -D...]
  local dir=$1
  shift
  env -u WBAUDIT_CACHE HOME="$work/home" "$cmake" -S "$src" -B "$dir" -G "Unix Makefiles" "${hints[@]}" "$@" > "$work/log" 2>&1
}

configure "$work/build" -DKokkos_DIR="$kokkos_dir" || fail "configure with explicit hints failed"
cache="$work/build/CMakeCache.txt"
grep -q "^WBAUDIT_KOKKOS_CACHE:PATH=$work/home/" "$cache" || fail "the default Kokkos cache was not the empty HOME's"
# Kokkos: its config where the hint says, its library on the link line of the executable, its headers on the
# compile line.
[ "$(grep '^Kokkos_DIR:' "$cache" | cut -d= -f2-)" = "$kokkos_dir" ] || fail "Kokkos_DIR is not the hinted one"
kokkos_prefix=$(cd "$kokkos_dir/../../.." && pwd)
link="$work/build/cli/CMakeFiles/wbaudit.dir/link.txt"
grep -q "$kokkos_prefix/lib[^ ]*/libkokkoscore\.so" "$link" || fail "wbaudit does not link the hinted Kokkos ($kokkos_prefix)"
grep -q -- "-isystem $kokkos_prefix/include" "$work"/build/sim/CMakeFiles/*/flags.make \
  || fail "the simulator does not compile against the hinted Kokkos headers"
# HDF5: library and headers under HDF5_ROOT.
grep -q "$hdf5_root/[^ ]*libhdf5[^ ]*\.so" "$link" || fail "wbaudit does not link HDF5 from HDF5_ROOT=$hdf5_root"
grep -q "^HDF5_C_INCLUDE_DIR:PATH=$hdf5_root/" "$cache" || fail "HDF5 headers not from HDF5_ROOT=$hdf5_root"
# The config-mode packages: found in the hinted directories.
for pair in "Eigen3_DIR=$eigen3_dir" "Boost_DIR=$boost_dir" "nlohmann_json_DIR=$json_dir" "CLI11_DIR=$cli11_dir" "tomlplusplus_DIR=$toml_dir" \
  "GTest_DIR=$gtest_dir" "MPI_C_COMPILER=$mpicc" "RANDOM123_INCLUDE_DIR=$random123"; do
  name=${pair%%=*} want=${pair#*=}
  [ "$(grep "^$name:" "$cache" | cut -d= -f2-)" = "$want" ] || fail "$name is not the hinted $want"
done
# The executable's RUNPATH starts with $ORIGIN/lib (the frozen libraries beside a sweep's copy, docs/install.md).
grep -q 'ORIGIN/lib' "$link" || fail "wbaudit is not linked with \$ORIGIN/lib in its RUNPATH"

# Without the hint the default cache is absent: the configure fails and says how to point at Kokkos.
if configure "$work/nohint"; then fail "configured without a Kokkos hint and without the default cache"; fi
grep -q "Kokkos" "$work/log" || fail "the failed configure does not name Kokkos"
echo "PASS: configured with explicit hints only; Kokkos from $kokkos_prefix, HDF5 from $hdf5_root"
