#pragma once
// Write-back policies q_F^pi: nearest (ties to even), stochastic (exact or r-bit), deadzone-sr, master (contrast).
#include <string>
#include <string_view>

namespace wbaudit::sim {

enum class Policy : int { nearest, stochastic, deadzone_sr, master };

// Where SR's random bits come from (rng.hpp). philox: each coordinate's first 32-bit word is its own word of a
// Philox4x32-10 block (the stream every trace so far was written with, and the default). philox-packed (a named
// opt-in): one such 32-bit word feeds floor(32 / r) neighbouring coordinates, r bits each, for r-bit SR with r in
// 1..16 (a quarter of the Philox work at r = 8); for exact SR (sr_bits 0) two coordinates share a word, 16 bits each,
// and the rare draws that need more bits continue from the coordinate's own further words (half the Philox work).
// The two streams give different draws: a run records which it used, and an audit replays it with the same one.
enum class SrStream : int { philox, philox_packed };

struct WritebackPolicy {
  Policy policy = Policy::nearest;
  int sr_bits = 0;  // 0: exact probabilities from all discarded bits; r in 1..32: hardware-like r-bit SR
  SrStream stream = SrStream::philox;
};

// philox-packed: the bits of a shared word each coordinate takes (sr_bits, or 16 for exact SR); 0 for philox.
// (constexpr: callable inside kernels, as sr_stream_of does.)
constexpr int sr_packed_bits(const WritebackPolicy& p) {
  return p.stream == SrStream::philox_packed ? (p.sr_bits > 0 ? p.sr_bits : 16) : 0;
}

// Throws std::invalid_argument naming the value and the known names / valid range.
Policy policy_from_name(std::string_view name);
std::string policy_name(Policy policy);
WritebackPolicy make_policy(std::string_view name, int sr_bits = 0);
// As above with the SR stream named ("philox" or "philox-packed"); philox-packed needs stochastic or deadzone-sr
// with sr_bits 0 (exact) or 1..16.
WritebackPolicy make_policy(std::string_view name, int sr_bits, std::string_view stream);
SrStream sr_stream_from_name(std::string_view name);
std::string sr_stream_name(SrStream stream);

}  // namespace wbaudit::sim
