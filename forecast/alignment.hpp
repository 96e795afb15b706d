#pragma once
// Time alignment of a series recorded on one set of steps onto another step grid. The rule is declared, never
// implicit: a grid step that is recorded takes the recorded value; a grid step strictly between two recorded steps
// takes the linear interpolation of its two recorded neighbours; a grid step outside [first, last] recorded step is
// never extrapolated (OutOfRange::error throws, OutOfRange::missing yields NaN). A NaN (missing) recorded value is
// never bridged: a grid step that needs it (exact match or bracketing neighbour) is NaN.
#include <cstdint>
#include <span>
#include <vector>

namespace wbaudit::forecast {

enum class OutOfRange { error, missing };

// Throws ForecastError when steps and values differ in length, steps are empty or not strictly increasing, a value
// is +-inf, grid is not strictly increasing, or (OutOfRange::error) a grid step lies outside the recorded range.
std::vector<double> align_series(std::span<const std::int64_t> steps, std::span<const double> values,
                                 std::span<const std::int64_t> grid, OutOfRange policy = OutOfRange::error);

// The steps present in every list (sorted). Throws ForecastError when a list is not strictly increasing, when
// no list is given, or when the intersection is empty.
std::vector<std::int64_t> common_steps(const std::vector<std::vector<std::int64_t>>& step_lists);

// Throws ForecastError (naming `what` and the offending index) unless steps is non-empty and strictly increasing.
void check_strictly_increasing(std::span<const std::int64_t> steps, const char* what);

}  // namespace wbaudit::forecast
