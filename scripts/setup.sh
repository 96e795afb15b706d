#!/usr/bin/env bash
# Installs everything wbaudit needs on Debian 12, idempotently: Debian packages (only those missing) and an
# OpenMP-enabled Kokkos built from Debian's trilinos source package into ~/.cache/wbaudit (see bootstrap-kokkos.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
packages=(
  build-essential cmake git pkg-config dpkg-dev clang-format clang-tidy
  libtrilinos-kokkos-dev libopenmpi-dev openmpi-bin libeigen3-dev libboost-dev libboost-math-dev libboost-random-dev
  libgtest-dev libbenchmark-dev librandom123-dev nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libssl-dev
  libhdf5-dev hdf5-tools gnuplot-nox slurmctld slurmd slurm-client munge
  libopenblas-dev pybind11-dev python3-dev python3-torch python3-numpy python3-h5py python3-pytest python3-venv python3-pip
  llvm-19-dev libzstd-dev libdeflate-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: Debian packages present"
fi
"$here/bootstrap-kokkos.sh"
