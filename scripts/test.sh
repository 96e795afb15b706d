#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 machine: install what is missing, build (release preset), run ctest.
# Unit tests run at 1 and 2 Kokkos threads; MPI tests at 1 and 2 ranks; Slurm tests against a local cluster.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)"
ctest --preset release -j"$(nproc)" "$@"
