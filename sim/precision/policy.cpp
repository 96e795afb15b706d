#include "sim/precision/policy.hpp"

#include <stdexcept>
#include <string>

namespace wbaudit::sim {

Policy policy_from_name(std::string_view name) {
  if (name == "nearest") {
    return Policy::nearest;
  }
  if (name == "stochastic") {
    return Policy::stochastic;
  }
  if (name == "deadzone-sr") {
    return Policy::deadzone_sr;
  }
  if (name == "master") {
    return Policy::master;
  }
  throw std::invalid_argument("unknown write-back policy \"" + std::string(name) +
                              "\" (known: nearest, stochastic, deadzone-sr, master)");
}

std::string policy_name(Policy policy) {
  switch (policy) {
    case Policy::nearest:
      return "nearest";
    case Policy::stochastic:
      return "stochastic";
    case Policy::deadzone_sr:
      return "deadzone-sr";
    case Policy::master:
      return "master";
  }
  throw std::invalid_argument("policy_name: invalid policy value " + std::to_string(static_cast<int>(policy)));
}

WritebackPolicy make_policy(std::string_view name, int sr_bits) {
  WritebackPolicy p;
  p.policy = policy_from_name(name);
  if (sr_bits < 0 || sr_bits > 32) {
    throw std::invalid_argument("sr_bits = " + std::to_string(sr_bits) +
                                " is out of range (0 = exact probabilities, or 1..32 random bits)");
  }
  if (sr_bits != 0 && p.policy != Policy::stochastic && p.policy != Policy::deadzone_sr) {
    throw std::invalid_argument("sr_bits = " + std::to_string(sr_bits) +
                                " applies only to stochastic and deadzone-sr, not " + std::string(name));
  }
  p.sr_bits = sr_bits;
  return p;
}

}  // namespace wbaudit::sim
