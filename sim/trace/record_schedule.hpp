#pragma once
// Which steps of a run are recorded in its trace.
//   every:   every step 0 .. steps-1
//   every_k: steps 0, k, 2k, ... and always the last step
//   log:     `points` distinct steps, log-spaced: step 0, then round(L^((i-1)/(points-2))) for i = 1..points-1
//            with L = steps - 1, each moved up to one past its predecessor where rounding collides (so the count is
//            exact), always ending at the last step; points >= steps records every step.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace wbaudit::sim {

enum class RecordKind : int { every, every_k, log };
RecordKind record_kind_from_name(std::string_view name);  // throws std::invalid_argument listing known names
std::string record_kind_name(RecordKind kind);

struct RecordConfig {
  RecordKind kind = RecordKind::log;
  std::int64_t k = 10;
  std::int64_t points = 100;
};

// Sorted, distinct recorded steps in [0, steps). Throws std::invalid_argument for steps <= 0, k <= 0 or points < 2.
std::vector<std::int64_t> recorded_steps(const RecordConfig& record, std::int64_t steps);

}  // namespace wbaudit::sim
