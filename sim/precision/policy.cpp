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

SrStream sr_stream_from_name(std::string_view name) {
  if (name == "philox") {
    return SrStream::philox;
  }
  if (name == "philox-packed") {
    return SrStream::philox_packed;
  }
  throw std::invalid_argument("unknown SR stream \"" + std::string(name) + "\" (known: philox, philox-packed)");
}

std::string sr_stream_name(SrStream stream) {
  switch (stream) {
    case SrStream::philox:
      return "philox";
    case SrStream::philox_packed:
      return "philox-packed";
  }
  throw std::invalid_argument("sr_stream_name: invalid stream value " + std::to_string(static_cast<int>(stream)));
}

WritebackPolicy make_policy(std::string_view name, int sr_bits, std::string_view stream) {
  WritebackPolicy p = make_policy(name, sr_bits);
  p.stream = sr_stream_from_name(stream);
  if (p.stream == SrStream::philox_packed &&
      ((p.policy != Policy::stochastic && p.policy != Policy::deadzone_sr) || sr_bits > 16)) {
    throw std::invalid_argument(
        "SR stream \"philox-packed\" needs stochastic or deadzone-sr with sr_bits 0 or 1..16 (it packs floor(32 / "
        "r) coordinates, or two for exact SR, into one 32-bit word), not " +
        std::string(name) + " with sr_bits = " + std::to_string(sr_bits));
  }
  return p;
}

}  // namespace wbaudit::sim
