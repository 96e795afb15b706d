#include "sim/trace/record_schedule.hpp"

#include <cmath>
#include <stdexcept>

namespace wbaudit::sim {

RecordKind record_kind_from_name(std::string_view name) {
  if (name == "every") {
    return RecordKind::every;
  }
  if (name == "every_k") {
    return RecordKind::every_k;
  }
  if (name == "log") {
    return RecordKind::log;
  }
  throw std::invalid_argument("unknown recording schedule \"" + std::string(name) + "\" (known: every, every_k, log)");
}

std::string record_kind_name(RecordKind kind) {
  switch (kind) {
    case RecordKind::every:
      return "every";
    case RecordKind::every_k:
      return "every_k";
    default:
      return "log";
  }
}

std::vector<std::int64_t> recorded_steps(const RecordConfig& record, std::int64_t steps) {
  if (steps <= 0) {
    throw std::invalid_argument("recorded_steps: steps must be positive, got " + std::to_string(steps));
  }
  std::vector<std::int64_t> out;
  const std::int64_t last = steps - 1;
  switch (record.kind) {
    case RecordKind::every:
      for (std::int64_t t = 0; t < steps; ++t) {
        out.push_back(t);
      }
      break;
    case RecordKind::every_k:
      if (record.k <= 0) {
        throw std::invalid_argument("recorded_steps: k must be positive, got " + std::to_string(record.k));
      }
      for (std::int64_t t = 0; t < steps; t += record.k) {
        out.push_back(t);
      }
      if (out.back() != last) {
        out.push_back(last);
      }
      break;
    case RecordKind::log: {
      if (record.points < 2) {
        throw std::invalid_argument("recorded_steps: points must be at least 2, got " + std::to_string(record.points));
      }
      if (record.points >= steps) {
        for (std::int64_t t = 0; t < steps; ++t) {
          out.push_back(t);
        }
        break;
      }
      const std::int64_t n = record.points;
      out.push_back(0);
      for (std::int64_t i = 1; i < n; ++i) {
        const double exponent = n == 2 ? 1.0 : static_cast<double>(i - 1) / static_cast<double>(n - 2);
        auto t = static_cast<std::int64_t>(std::llround(std::pow(static_cast<double>(last), exponent)));
        t = std::max(t, out.back() + 1);
        t = std::min(t, last - (n - 1 - i));  // leave room for the remaining points
        out.push_back(t);
      }
      break;
    }
  }
  return out;
}

}  // namespace wbaudit::sim
