#pragma once
// Write-back policies q_F^pi: nearest (ties to even), stochastic (exact or r-bit), deadzone-sr, master (contrast).
#include <string>
#include <string_view>

namespace wbaudit::sim {

enum class Policy : int { nearest, stochastic, deadzone_sr, master };

struct WritebackPolicy {
  Policy policy = Policy::nearest;
  int sr_bits = 0;  // 0: exact probabilities from all discarded bits; r in 1..32: hardware-like r-bit SR
};

// Throws std::invalid_argument naming the value and the known names / valid range.
Policy policy_from_name(std::string_view name);
std::string policy_name(Policy policy);
WritebackPolicy make_policy(std::string_view name, int sr_bits = 0);

}  // namespace wbaudit::sim
