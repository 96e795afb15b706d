#pragma once
// Crossing times of an erased-fraction trajectory, and predicted-vs-measured crossing comparisons (docs/science.md §2,
// "Crossing time"). docs/forecasting.md states every rule below with examples.
//
// For a trajectory y on recorded steps, threshold theta and burn-in t0:
//  * y(t0) is the recorded value at t0, or the linear interpolation between the recorded neighbours of t0 when t0
//    falls between recorded steps (the same line the crossing search uses, so the two never disagree).
//  * y(t0) >= theta: `above_at_init` — never a crossing at t0.
//  * otherwise the crossing time is the first t > t0 where y reaches theta (y >= theta), linearly interpolated
//    between the last point below theta and the first point at or above it; a value exactly equal to theta at a
//    recorded step crosses at that step.
//  * no recorded point after t0 reaches theta: `not_crossed`, censored at the last observed step.
//  * NaN values are missing: they are skipped, and the interpolation runs between the neighbouring observed points.
//    When y(t0) cannot be determined (t0 before the first or after the last observed point, or no observed point at
//    all) the status is `undetermined`: no value is invented.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stats/table.hpp"

namespace wbaudit::forecast {

struct CrossingOptions {
  double threshold = 0.5;               // theta
  std::optional<std::int64_t> burn_in;  // t0; default: the first recorded step
  double tolerance = 0.15;              // relative-error tolerance for "within" (|t_hat - t| / t <= tolerance)
  // Cells whose group has fewer coordinates (erased fraction in steps of 1/size) are left out of the headline
  // and counted apart; 0: no minimum. Only applies where the caller passes group sizes.
  std::int64_t min_group_size = 0;
};

// The default burn-in of a run of `steps` optimizer steps: 0.5% of the run (floor(5 steps / 1000)), so that a
// trajectory crossing within its first few steps counts as "above at initialization", not as a forecast success,
// while crossing times can still span more than two decades (up to 200x).
inline constexpr std::int64_t kDefaultBurnInPerMille = 5;
std::int64_t default_burn_in(std::int64_t steps);

enum class CrossingStatus { crossed, not_crossed, above_at_init, undetermined };
const char* to_string(CrossingStatus status);

struct Crossing {
  CrossingStatus status = CrossingStatus::undetermined;
  double time = 0;              // crossed: the interpolated crossing step (> t0); NaN otherwise
  double censored_at = 0;       // not_crossed: the last observed step; NaN otherwise
  double burn_in = 0;           // t0 used
  double value_at_burn_in = 0;  // y(t0) (NaN when undetermined)
  // crossed: how often an observed point after the crossing falls back below theta after a point at or above it
  // (a trajectory that touches the threshold and leaves again, e.g. a 1/32-step fraction tied at theta); 0 otherwise
  int recrossings = 0;
};

// Throws ForecastError when steps and y differ in length, steps are empty, negative or not strictly increasing,
// a value is +-inf, or the threshold is not finite.
Crossing find_crossing(std::span<const std::int64_t> steps, std::span<const double> y,
                       const CrossingOptions& options = {});

// find_crossing on every row of a table (row order kept). Throws ForecastError naming the cell on bad rows, and when
// the table's values do not match its labels.
std::vector<Crossing> find_crossings(const stats::CellTable& table, const CrossingOptions& options = {});

// Predicted vs measured category of one cell.
enum class CrossingCategory {
  both_cross,
  only_predicted,           // predicted crosses, measured does not cross (measured not_crossed)
  only_measured,            // measured crosses, predicted not_crossed
  neither,                  // both not_crossed
  both_above_at_init,       // both already at or above theta at t0
  measured_above_at_init,   // measured above at t0, predicted not
  predicted_above_at_init,  // predicted above at t0, measured not
  undetermined,             // either side undetermined
};
const char* to_string(CrossingCategory category);
CrossingCategory categorize(CrossingStatus predicted, CrossingStatus measured);

struct CellCrossing {
  std::string cell;
  Crossing predicted;
  Crossing measured;
  CrossingCategory category = CrossingCategory::undetermined;
  double relative_error = 0;          // both_cross: |t_hat - t| / t; NaN otherwise
  bool within_tolerance = false;      // both_cross and relative_error <= tolerance
  bool differs = false;               // both determined and predicted.status != measured.status
  std::int64_t group_size = -1;       // coordinates of the cell's group; -1: not given
  bool below_min_group_size = false;  // 0 <= group_size < options.min_group_size: left out of the headline
};

// The headline within one decade of measured crossing time [lo, hi) = [10^k, 10^(k+1)) steps.
struct CrossingDecade {
  double lo = 0, hi = 0;
  int measured_crossing = 0;         // cells whose measured crossing lies in the decade
  int both_cross = 0;                // of those, predicted crosses too
  int within_tolerance = 0;          // of those, within the tolerance
  double median_relative_error = 0;  // over its both_cross cells; NaN when none
};

struct CrossingSummary {
  double threshold = 0.5;
  double burn_in = 0;
  double tolerance = 0.15;
  int cells = 0;
  int both_cross = 0, only_predicted = 0, only_measured = 0, neither = 0;
  int both_above_at_init = 0, measured_above_at_init = 0, predicted_above_at_init = 0, undetermined = 0;
  int within_tolerance = 0;          // among both_cross
  int differ_in_category = 0;        // determined cells whose predicted and measured statuses differ
  int measured_crossing = 0;         // cells whose measured trajectory crosses (both_cross + only_measured)
  double measured_span = 0;          // max t / min t over measured crossing cells; NaN when none cross
  double predicted_span = 0;         // the same over predicted crossing cells
  double median_relative_error = 0;  // over both_cross cells; NaN when none
  // Cells left out of every count above: their group has fewer than min_group_size coordinates.
  int below_min_group_size = 0;
  std::int64_t min_group_size = 0;
  int measured_recrossing = 0;   // headline cells whose measured trajectory falls back below theta after crossing
  int predicted_recrossing = 0;  // the same for the predicted trajectory
  std::vector<CrossingDecade> by_decade;  // ascending; decades of measured crossing time with at least one cell

  // e.g. "55/72 both cross, 52/55 within 15%, 4/72 differ in category, measured span 384x", followed, when they
  // apply, by "; 3 measured re-crossings" and "; 8 cells below 64 coordinates left out".
  std::string to_string() const;
};

struct CrossingComparison {
  std::vector<CellCrossing> cells;
  CrossingSummary summary;
};

// One cell, predicted and measured possibly recorded on different steps (crossing times are step values, so no
// alignment is needed). The burn-in default is the measured series' first recorded step, used for both sides.
// Throws ForecastError (naming the cell) on bad input.
CellCrossing compare_cell_crossing(const std::string& cell, std::span<const std::int64_t> predicted_steps,
                                   std::span<const double> predicted, std::span<const std::int64_t> measured_steps,
                                   std::span<const double> measured, const CrossingOptions& options = {},
                                   std::int64_t group_size = -1);

// Counts, within-tolerance share, spans and median relative error over per-cell results (the summary's
// definitions above). burn_in is the cells' common t0, NaN when they differ. Throws ForecastError when empty.
CrossingSummary summarize_crossings(const std::vector<CellCrossing>& cells, const CrossingOptions& options = {});

// Row-by-row comparison of a predictor table against the measured outcome table. Throws ForecastError unless the
// two tables have the same cells (same order) and the same steps.
// group_sizes (optional, one per cell) enables options.min_group_size.
CrossingComparison compare_crossings(const stats::CellTable& predicted, const stats::CellTable& measured,
                                     const CrossingOptions& options = {},
                                     std::span<const std::int64_t> group_sizes = {});

}  // namespace wbaudit::forecast
