#include "stats/recovery.hpp"

#include <cmath>

#include "stats/error.hpp"

namespace wbaudit::stats {

double recovery(double loss_nearest, double loss_policy, double loss_reference) {
  if (!std::isfinite(loss_nearest) || !std::isfinite(loss_policy) || !std::isfinite(loss_reference)) {
    throw StatsError("recovery: losses must be finite (L_N = " + value_text(loss_nearest) +
                     ", L_P = " + value_text(loss_policy) + ", L_R = " + value_text(loss_reference) + ")");
  }
  if (loss_nearest == loss_reference) {
    throw StatsError("recovery: L_N == L_R = " + value_text(loss_nearest) +
                     ", so (L_N - L_P) / (L_N - L_R) is undefined (no gap to recover)");
  }
  return (loss_nearest - loss_policy) / (loss_nearest - loss_reference);
}

}  // namespace wbaudit::stats
