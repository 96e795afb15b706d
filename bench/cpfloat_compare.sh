#!/usr/bin/env bash
# wbaudit's write-back side by side with CPFloat (docs/performance.md, "Side by side with CPFloat").
#
# Builds bench/cpfloat/ (a small C++ program linking the release build's libwbaudit_sim.a, and CPFloat's
# header-only library compiled as C with -O3 -march=native -fopenmp) from a CPFloat source tree you point it at;
# CPFloat is not a dependency of wbaudit and nothing in wbaudit's CMake builds this. Then runs interleaved pairs of
# w <- round(w + u) with erased-coordinate counts and prints, per format and policy, both speeds, their ratio and both
# erased fractions (they cross-check the two implementations).
#
# Usage: bench/cpfloat_compare.sh --cpfloat DIR [--pcg DIR] [--build DIR] [--work DIR] [--isa LIST]
#                                 [--threads N] [--pairs N] [--elements N] [--min-time S] [--formats a,b,...]
#   --cpfloat DIR   CPFloat source tree (https://github.com/north-numerical-computing/cpfloat; needs src/)
#   --pcg DIR       pcg-c source tree (https://github.com/imneme/pcg-c): CPFloat's recommended generator. Without
#                   it CPFloat falls back to a generator whose SR statistics are off (erased fractions disagree).
#   --build DIR     wbaudit build tree, already built (default: build/release of this checkout)
#   --work DIR      where the comparison is built (default: <build>/cpfloat_compare)
#   --isa LIST      wbaudit block loops to measure, comma-separated: best, avx512, avx2, portable, all (default best)
#   --threads N     threads of both sides (OMP_NUM_THREADS and --kokkos-threads; default 1)
#   --pairs N, --elements N, --min-time S, --formats LIST: passed on (defaults 5, 16777216, 0.2, bf16,e4m3,e2m1)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cpfloat="" pcg="" build="$repo/build/release" work="" isas="best" threads=1
passthrough=()
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cpfloat) cpfloat=${2:?--cpfloat needs a directory}; shift 2 ;;
    --pcg) pcg=${2:?--pcg needs a directory}; shift 2 ;;
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --work) work=${2:?--work needs a directory}; shift 2 ;;
    --isa) isas=${2:?--isa needs a list}; shift 2 ;;
    --threads) threads=${2:?--threads needs a number}; shift 2 ;;
    --pairs|--elements|--min-time|--formats) passthrough+=("$1" "${2:?$1 needs a value}"); shift 2 ;;
    -h|--help) usage ;;
    *) echo "cpfloat_compare.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ -n "$cpfloat" ]] || { echo "cpfloat_compare.sh: --cpfloat DIR is required" >&2; usage; }
[[ -f "$cpfloat/src/cpfloat_binary32.h" ]] || { echo "cpfloat_compare.sh: $cpfloat/src/cpfloat_binary32.h not found (--cpfloat)" >&2; exit 1; }
[[ -z "$pcg" || -f "$pcg/include/pcg_variants.h" ]] || { echo "cpfloat_compare.sh: $pcg/include/pcg_variants.h not found (--pcg)" >&2; exit 1; }
[[ -f "$build/CMakeCache.txt" && -f "$build/sim/libwbaudit_sim.a" ]] || {
  echo "cpfloat_compare.sh: $build is not a built wbaudit tree (no CMakeCache.txt or sim/libwbaudit_sim.a): cmake --build --preset release first" >&2; exit 1; }
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || { echo "cpfloat_compare.sh: --threads $threads is not a positive integer" >&2; exit 2; }
build=$(cd "$build" && pwd)
cpfloat=$(cd "$cpfloat" && pwd)
[[ -z "$pcg" ]] || pcg=$(cd "$pcg" && pwd)
work=${work:-$build/cpfloat_compare}
[[ "$isas" == all ]] && isas="avx512,avx2,portable"

echo "== building the comparison in $work" >&2
cmake -S "$repo/bench/cpfloat" -B "$work" -DCMAKE_BUILD_TYPE=Release -DWBAUDIT_BUILD_DIR="$build" \
  -DCPFLOAT_DIR="$cpfloat" -DPCG_DIR="$pcg" >/dev/null
cmake --build "$work" -j2 >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; exit 1; }

describe() { git -C "$1" describe --always --dirty 2>/dev/null || echo "not a git tree"; }
echo "wbaudit: $(describe "$repo"), build $build"
echo "CPFloat: $cpfloat ($(describe "$cpfloat")); pcg-c: ${pcg:-none}${pcg:+ ($(describe "$pcg"))}"
echo "load: $(uptime)"
IFS=, read -r -a isa_list <<<"$isas"
for isa in "${isa_list[@]}"; do
  echo
  echo "== wbaudit loops: $isa, $threads thread(s)"
  args=(--kokkos-threads="$threads")
  [[ "$isa" == best ]] || args+=(--isa "$isa")
  OMP_NUM_THREADS=$threads OMP_PROC_BIND=false "$work/cpfloat_compare" "${args[@]}" ${passthrough[@]+"${passthrough[@]}"}
done
