#pragma once
// Recovery of a write-back policy P against nearest rounding N and the fp32 reference R, on validation loss:
//   recovery = (L_N - L_P) / (L_N - L_R)
// 1 = P closes the whole gap between nearest and the reference, 0 = no better than nearest, < 0 = worse.
#include <string>

namespace wbaudit::stats {

// Throws StatsError when a loss is not finite or L_N == L_R (no gap to recover).
double recovery(double loss_nearest, double loss_policy, double loss_reference);

}  // namespace wbaudit::stats
