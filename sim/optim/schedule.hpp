#pragma once
// Learning-rate schedules. Every schedule starts with an optional linear warm-up over warmup_steps steps
// (lr * (t + 1) / warmup_steps); after it:
//   constant:         lr
//   warmup:           lr (the warm-up alone)
//   cosine:           lr * (r + (1 - r) * (1 + cos(pi * tau / T)) / 2), tau = t - warmup, T = steps - warmup
//   cosine_restarts:  the same with tau = (t - warmup) mod period, T = period (SGDR without period growth)
//   step:             lr * gamma^floor((t - warmup) / step_size)
// with r = min_lr_ratio.
#include <cstdint>
#include <string>
#include <string_view>

namespace wbaudit::sim {

enum class ScheduleKind : int { constant, warmup, cosine, cosine_restarts, step };
ScheduleKind schedule_kind_from_name(std::string_view name);  // throws std::invalid_argument listing known names
std::string schedule_kind_name(ScheduleKind kind);

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::constant;
  std::int64_t warmup_steps = 0;
  std::int64_t period = 1000;
  double min_lr_ratio = 0.0;
  std::int64_t step_size = 1000;
  double gamma = 0.1;
};

// The learning rate at 0-based step t of a run of `steps` steps, computed in double and rounded once to fp32.
float scheduled_learning_rate(const ScheduleConfig& schedule, double base_lr, std::int64_t step, std::int64_t steps);

}  // namespace wbaudit::sim
