#include "sim/optim/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace wbaudit::sim {

ScheduleKind schedule_kind_from_name(std::string_view name) {
  if (name == "constant") {
    return ScheduleKind::constant;
  }
  if (name == "warmup") {
    return ScheduleKind::warmup;
  }
  if (name == "cosine") {
    return ScheduleKind::cosine;
  }
  if (name == "cosine_restarts") {
    return ScheduleKind::cosine_restarts;
  }
  if (name == "step") {
    return ScheduleKind::step;
  }
  throw std::invalid_argument("unknown schedule \"" + std::string(name) +
                              "\" (known: constant, warmup, cosine, cosine_restarts, step)");
}

std::string schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::constant:
      return "constant";
    case ScheduleKind::warmup:
      return "warmup";
    case ScheduleKind::cosine:
      return "cosine";
    case ScheduleKind::cosine_restarts:
      return "cosine_restarts";
    default:
      return "step";
  }
}

float scheduled_learning_rate(const ScheduleConfig& schedule, double base_lr, std::int64_t step, std::int64_t steps) {
  if (schedule.warmup_steps > 0 && step < schedule.warmup_steps) {
    return static_cast<float>(base_lr * static_cast<double>(step + 1) / static_cast<double>(schedule.warmup_steps));
  }
  const std::int64_t tau = step - std::max<std::int64_t>(schedule.warmup_steps, 0);
  const double r = schedule.min_lr_ratio;
  auto cosine = [&](double position, double length) {
    return base_lr * (r + (1.0 - r) * 0.5 * (1.0 + std::cos(std::numbers::pi * position / length)));
  };
  switch (schedule.kind) {
    case ScheduleKind::constant:
    case ScheduleKind::warmup:
      return static_cast<float>(base_lr);
    case ScheduleKind::cosine: {
      const std::int64_t length = std::max<std::int64_t>(steps - std::max<std::int64_t>(schedule.warmup_steps, 0), 1);
      return static_cast<float>(cosine(static_cast<double>(tau), static_cast<double>(length)));
    }
    case ScheduleKind::cosine_restarts:
      return static_cast<float>(
          cosine(static_cast<double>(tau % schedule.period), static_cast<double>(schedule.period)));
    default: {
      const std::int64_t decays = tau / schedule.step_size;  // floor division: completed step_size periods
      return static_cast<float>(base_lr * std::pow(schedule.gamma, static_cast<double>(decays)));
    }
  }
}

}  // namespace wbaudit::sim
