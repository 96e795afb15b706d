#!/usr/bin/env bash
# Build Kokkos with the OpenMP backend from Debian's own trilinos source package into a cache directory.
# Debian ships Kokkos (libtrilinos-kokkos-dev) with the Serial backend only; wbaudit needs real threads.
# Idempotent: does nothing when the cache already holds an installed OpenMP Kokkos.
# Usage: scripts/bootstrap-kokkos.sh [PREFIX]    (default: ${WBAUDIT_CACHE:-$HOME/.cache/wbaudit}/kokkos-openmp)
set -euo pipefail
cache=${WBAUDIT_CACHE:-$HOME/.cache/wbaudit}
prefix=${1:-$cache/kokkos-openmp}
if [ -f "$prefix/lib/cmake/Kokkos/KokkosConfig.cmake" ] && grep -q "OPENMP" "$prefix/include/KokkosCore_config.h" 2>/dev/null; then
  echo "bootstrap-kokkos: OpenMP Kokkos already at $prefix"
  exit 0
fi
work=$cache/kokkos-src
mkdir -p "$work"
cd "$work"
if ! ls trilinos_*.orig.tar.* >/dev/null 2>&1; then
  # A private apt configuration that adds deb-src entries for the machine's own Debian mirror, so that
  # `apt-get source` works without touching the system's sources.
  uri=$(grep -hoE '^URIs: *[^ ]+' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -n1 || true)
  [ -n "$uri" ] || uri=$(grep -hoE '^deb +[^ ]+' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -n1 || true)
  [ -n "$uri" ] || { echo "bootstrap-kokkos: cannot find the Debian mirror URI in /etc/apt" >&2; exit 1; }
  apt_dir=$work/apt
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial"
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri bookworm main" > "$apt_dir/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=-" -o "Dir::State::Lists=$apt_dir/lists"
            -o "Dir::Cache::Archives=$apt_dir/archives" -o "APT::Sandbox::User=root")
  apt-get "${apt_opts[@]}" update -qq
  apt-get "${apt_opts[@]}" source --download-only trilinos
fi
tarball=$(ls trilinos_*.orig.tar.* | head -n1)
if [ ! -d kokkos ]; then
  rm -rf extract && mkdir extract
  tar -xf "$tarball" -C extract --wildcards '*/packages/kokkos/*'
  mv extract/*/packages/kokkos kokkos
  rm -rf extract
fi
cmake -S kokkos -B kokkos-build -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_TESTS=OFF -DCMAKE_CXX_STANDARD=20 \
  -DBUILD_SHARED_LIBS=ON >/dev/null
cmake --build kokkos-build -j"$(nproc)" >build.log 2>&1 || { tail -50 build.log >&2; exit 1; }
cmake --install kokkos-build >/dev/null
echo "bootstrap-kokkos: installed OpenMP Kokkos at $prefix"
