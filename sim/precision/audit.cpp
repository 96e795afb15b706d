#include "sim/precision/audit.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "sim/precision/rounding.hpp"

namespace wbaudit::sim {
namespace {

std::string text(float v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

bool representable(const FormatParams& p, float v) {
  const double d = v;
  return std::fabs(d) <= p.max_finite && round_nearest(p, d) == d;
}

}  // namespace

AuditReport audit_writeback(const FormatSpec& fmt, const WritebackPolicy& policy, std::span<const float> w,
                            std::span<const float> u, std::span<const float> w_next, std::uint32_t tensor_id,
                            std::uint64_t step, std::optional<RngKey> replay) {
  if (w.size() != u.size() || w.size() != w_next.size()) {
    throw std::invalid_argument("audit_writeback: extents differ (w " + std::to_string(w.size()) + ", u " +
                                std::to_string(u.size()) + ", w_next " + std::to_string(w_next.size()) + ")");
  }
  if (policy.policy == Policy::master) {
    throw std::invalid_argument(
        "audit_writeback: policy master cannot be audited from w and u alone (the fp32 "
        "master copy is not part of the trajectory)");
  }
  const FormatParams p = format_params(fmt);
  AuditReport report;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const float wi = w[i], ui = u[i], ni = w_next[i];
    if (!std::isfinite(wi) || !std::isfinite(ui) || !std::isfinite(ni)) {
      throw NonFiniteError("audit_writeback (tensor " + std::to_string(tensor_id) + ", step " + std::to_string(step) +
                           "): non-finite value at coordinate " + std::to_string(i) + ": w = " + text(wi) +
                           ", u = " + text(ui) + ", w_next = " + text(ni));
    }
    const Bracket b = bracket_of(p, exact_sum(wi, ui));
    const auto nearest = static_cast<float>(nearest_of(b));
    auto& c = report.counts;
    c.nonzero += ui != 0;
    c.erased += ui != 0 && ni == wi;
    c.applied += ni != wi;
    c.saturated += b.saturated;
    report.nearest_erased += ui != 0 && nearest == wi;

    const bool sr =
        policy.policy == Policy::stochastic || (policy.policy == Policy::deadzone_sr && ui != 0 && nearest == wi);
    float low = nearest, high = nearest;
    if (sr && !b.exact) {
      low = static_cast<float>(b.sign * b.tz);
      high = static_cast<float>(b.sign * b.away);
      bool truncated = false;
      if (policy.sr_bits > 0) {
        const double two_r = std::ldexp(1.0, policy.sr_bits);
        double d;
        ExactSum rest;
        detail::divmod_exact(ExactSum{b.rem.hi * two_r, b.rem.lo * two_r}, b.S, 1.0 / b.S, d, rest);
        truncated = d == 0;
      }
      c.sr_truncated += truncated;
      c.sr_applied += !truncated;
      if (truncated) {
        high = low;  // the r-bit dead zone never moves away from zero
      }
      if (replay) {
        PhiloxStream stream(*replay, i);
        low = high = static_cast<float>(stochastic_of(b, policy.sr_bits, stream).value);
      }
    }
    std::string reason;
    if (!representable(p, ni)) {
      reason = "w[t+1] = " + text(ni) + " is not representable in " + fmt.name;
    } else if (ni != low && ni != high) {
      if (low == high) {
        reason = "expected " + text(low) + " under " + policy_name(policy.policy) + (replay && sr ? " (replayed)" : "");
      } else {
        reason =
            "expected one of the neighbours " + text(low) + ", " + text(high) + " under " + policy_name(policy.policy);
      }
    }
    if (!reason.empty()) {
      report.inconsistencies.push_back({static_cast<std::uint64_t>(i), wi, ui, ni, low, high, reason});
    }
  }
  return report;
}

}  // namespace wbaudit::sim
