#pragma once
// Internal to the precision layer: the vectorized block loops behind the write-back kernels (writeback.cpp).
//
// Each block function handles up to kWritebackBlock coordinates with a loop the compiler vectorizes (plain IEEE
// arithmetic and integer bit manipulation, no branches), compiled for SSE2, AVX2 and AVX-512 and picked at load time.
// It writes w[k] <- q(w[k] + u[k]) in place for every coordinate it can decide exactly and *flags* the rest
// (non-finite input or sum, sums not exact in the working precision, intK near-ties, SR draws whose first 32 random
// bits tie); flagged coordinates keep w[k] and are left out of the counts, and the caller recomputes them with the
// exact scalar path (writeback_value), which consumes the same random words. So the kernels' results are exactly
// writeback_value's, for every coordinate (tests/sim/precision/test_writeback_blocks.cpp checks this coordinate by
// coordinate).
#include <cstdint>

#include "sim/precision/policy.hpp"
#include "sim/precision/rng.hpp"
#include "sim/precision/rounding.hpp"

namespace wbaudit::sim::detail {

inline constexpr std::int64_t kWritebackBlock = 1024;

// Event counts of the coordinates a block function decided (flagged ones excluded).
struct BlockCounts {
  std::int64_t nonzero = 0;
  std::int64_t erased = 0;
  std::int64_t applied = 0;
  std::int64_t saturated = 0;
  std::int64_t random = 0;     // SR: the draw decided
  std::int64_t truncated = 0;  // r-bit SR dead zone
};

// Constants of a format for the block loops, derived once per kernel launch.
struct BlockParams {
  // fp32 lanes, floating formats (nearest): round the fp32 bit pattern to the format's significand width.
  std::uint32_t mask = 0;      // low fp32 significand bits dropped by the format ((1 << (23 - M)) - 1)
  std::uint32_t half_m1 = 0;   // half of the format's unit in those bits, minus one (0 for fp32)
  std::uint32_t lsb_mask = 0;  // the lowest kept bit (1 << (23 - M)), or 0 for fp32 (no rounding)
  std::uint32_t tie_bits = 0;  // the dropped bits of an exact midpoint (no tie for fp32: all ones)
  float sub_limit = 0;         // min normal when the format's subnormal range lies in fp32's normal range (0: none)
  std::uint32_t max_bits = 0;  // fp32 bits of max finite
  // fp32 lanes, floating formats (stochastic): K = 32 - (23 - M), and the exponent field of the format's min normal
  // (at least 1): below it (or at it) a step down from a power of two is not half as wide. sr_fp32_lanes: the
  // stochastic loops may run in fp32 lanes (floating formats but fp32; intK, AVX-512 loops only, with a scale in
  // [2^-90, 2^90]).
  bool sr_fp32_lanes = false;
  std::uint32_t k_shift = 0;
  std::uint32_t emin_field = 1;
  // fp32 lanes, intK (nearest)
  float scale = 1, inv_scale = 1;
  float tie_guard = 0;  // |dist| at or beyond this (just under scale / 2) is decided by the exact path
  // fp64 lanes (stochastic policies and the double-lane nearest fallback)
  double max_finite = 0;
  double min_normal = 0;
  double c_factor = 0;     // 1.5 * 2^(52 - M)
  double unit_factor = 0;  // 2^-M
  double scale64 = 1, inv_scale64 = 1;
  float scale_c32 = 0;  // intK: 2^32 / scale as fp32 (2^32 * inv_scale; the AVX-512 SR loop)
  int sr_bits = 0;
  // Full-width SR: how many values of U * 2^32 a first word leaves open (its low bits not drawn yet): 1, or 2^16 for
  // the packed stream's 16-bit first draws (a word w decides "away" only when w + sr_span <= the threshold).
  std::uint32_t sr_span = 1;
};

BlockParams block_params(const FormatParams& p, int sr_bits);

// True when the fp32-lane nearest loops cover the format (all floating formats; intK with a scale in
// [2^-100, 2^100]); otherwise the fp64-lane nearest loop is used.
bool fp32_lanes_cover(const FormatParams& p);

// Nearest write-back of a block in fp32 lanes. Returns the number of flagged coordinates.
std::int64_t nearest_block_float(const BlockParams& bp, float* w, const float* u, unsigned char* flags,
                                 std::int64_t len, BlockCounts& counts);
std::int64_t nearest_block_integer(const BlockParams& bp, float* w, const float* u, unsigned char* flags,
                                   std::int64_t len, BlockCounts& counts);
// Nearest write-back of a block in fp64 lanes (any format; intK with extreme scales).
std::int64_t nearest_block_fp64(const BlockParams& bp, bool integer, float* w, const float* u, unsigned char* flags,
                                std::int64_t len, BlockCounts& counts);

// Master-copy write-back of a block: m = master + u in fp32 (the master update), w = q_nearest(m), with the events
// counted against the old w; master and w are written for the coordinates decided. Flagged (master and w left
// unchanged): m or w NaN/inf (m is where master or u is, or where the update overflowed fp32), and coordinates the
// nearest loop cannot decide (intK near ties). lanes_fp64: the fp64-lane nearest loop rounds (intK with extreme
// scales), otherwise the fp32-lane loop for integer or floating formats.
std::int64_t master_block(const BlockParams& bp, bool integer, bool lanes_fp64, float* master, float* w, const float* u,
                          unsigned char* flags, std::int64_t len, BlockCounts& counts);

// Stochastic (mode 1) and deadzone-sr (mode 2) write-back of a block (fp32 lanes for floating formats but fp32 and,
// in the AVX-512 loops, for intK with a scale in [2^-90, 2^90]; fp64 lanes otherwise); words[k] is the first random
// word of coordinate k (philox_first_words).
std::int64_t stochastic_block(const BlockParams& bp, bool integer, int mode, float* w, const float* u,
                              const std::uint32_t* words, unsigned char* flags, std::int64_t len, BlockCounts& counts);

// The first random word of coordinates first .. first + len - 1 (len <= kWritebackBlock) under key: word c % 4 of
// the Philox4x32-10 block with counter (c / 4, step, tensor), exactly as PhiloxStream::first_words, computed for
// all groups of the block at once in vector lanes.
void philox_first_words(const RngKey& key, std::uint64_t first, std::int64_t len, std::uint32_t* words);
// The same words computed in place in scratch (at least kPhiloxScratch words: whole batches of groups), without the
// copy: returns where coordinate first's word lies in scratch (the others follow it).
inline constexpr std::int64_t kPhiloxScratch = 4 * (kWritebackBlock / 4 + 2 + 32);
const std::uint32_t* philox_first_words_in(const RngKey& key, std::uint64_t first, std::int64_t len,
                                           std::uint32_t* scratch);
// The first random words of coordinates first .. first + len - 1 under the policy's SR stream: philox_first_words_in
// for philox; for philox-packed, each coordinate's r bits of the shared word in the top r bits of its word (exactly
// PhiloxStream's first word), from a quarter (r = 8) or half (r = 16) as many Philox words. Returns where coordinate
// first's word lies in scratch (kPhiloxScratch words).
const std::uint32_t* sr_first_words_in(const RngKey& key, const WritebackPolicy& policy, std::uint64_t first,
                                       std::int64_t len, std::uint32_t* scratch);

// ---- Which loops run ----
// Three implementations, chosen at load time: the AVX-512 loops (writeback_blocks_avx512.cpp, intrinsics) when the
// CPU has AVX-512 F/BW/DQ/VL; else the AVX2 loops (writeback_blocks_avx2.cpp, intrinsics) when it has AVX2 and FMA;
// else the portable loops above (compiled for SSE2, AVX2 and AVX-512 and picked at load time). All decide every
// coordinate exactly as writeback_value or flag it; the AVX-512 and AVX2 loops also run deadzone-sr and intK SR in
// fp32 lanes. With any of them, flags[k] is meaningful only when the function returned a count > 0.
enum class BlockIsa { portable = 0, avx2 = 1, avx512 = 2 };
const char* block_isa_name(BlockIsa isa);  // "portable", "avx2", "avx512"
bool block_isa_supported(BlockIsa isa);    // portable: always
BlockIsa best_block_isa();                 // the best this CPU supports (the default)
// Tests and benchmarks: run the loops of `isa` (an ISA the CPU lacks is refused: the best supported one at or below
// it runs instead); returns the implementation now active. Not for use while kernels run.
BlockIsa force_block_isa(BlockIsa isa);
BlockIsa active_block_isa();

bool avx512_blocks_supported();
bool avx2_blocks_supported();
// Force the portable loops (true) or restore the default (false); returns whether the AVX-512 loops are used.
bool force_portable_blocks(bool on);
bool avx512_blocks_active();

namespace avx512 {
std::int64_t nearest_block_float(const BlockParams& bp, float* w, const float* u, unsigned char* flags,
                                 std::int64_t len, BlockCounts& counts);
std::int64_t nearest_block_integer(const BlockParams& bp, float* w, const float* u, unsigned char* flags,
                                   std::int64_t len, BlockCounts& counts);
std::int64_t master_block_float(const BlockParams& bp, float* master, float* w, const float* u, unsigned char* flags,
                                std::int64_t len, BlockCounts& counts);
std::int64_t master_block_integer(const BlockParams& bp, float* master, float* w, const float* u, unsigned char* flags,
                                  std::int64_t len, BlockCounts& counts);
// bp.sr_fp32_lanes must hold (mode 1 stochastic, 2 deadzone-sr).
std::int64_t stochastic_block_float(const BlockParams& bp, int mode, float* w, const float* u,
                                    const std::uint32_t* words, unsigned char* flags, std::int64_t len,
                                    BlockCounts& counts);
std::int64_t stochastic_block_integer(const BlockParams& bp, int mode, float* w, const float* u,
                                      const std::uint32_t* words, unsigned char* flags, std::int64_t len,
                                      BlockCounts& counts);
// Philox groups g0 .. g0 + groups - 1 rounded up to a multiple of 32: out needs room for 4 * that many words.
void philox_groups(std::uint32_t k0, std::uint32_t k1, std::uint32_t step, std::uint32_t tensor, std::uint64_t g0,
                   std::int64_t groups, std::uint32_t* out);
}  // namespace avx512

namespace avx2 {
// out[k] = chunk offset + k of the words at src (r = 8: bytes, 16: half-words, little-endian), in the top r bits.
void expand_chunks(const std::uint32_t* src, std::int64_t offset, std::int64_t len, int r, std::uint32_t* out);
std::int64_t nearest_block_float(const BlockParams& bp, float* w, const float* u, unsigned char* flags,
                                 std::int64_t len, BlockCounts& counts);
std::int64_t nearest_block_integer(const BlockParams& bp, float* w, const float* u, unsigned char* flags,
                                   std::int64_t len, BlockCounts& counts);
std::int64_t master_block_float(const BlockParams& bp, float* master, float* w, const float* u, unsigned char* flags,
                                std::int64_t len, BlockCounts& counts);
std::int64_t master_block_integer(const BlockParams& bp, float* master, float* w, const float* u, unsigned char* flags,
                                  std::int64_t len, BlockCounts& counts);
// Whether stochastic_block_float covers bp (bp.sr_fp32_lanes, and r-bit SR with steps 2^(32-r) coarser than the
// window loop's uncertainty); otherwise the portable loops run.
bool stochastic_float_covers(const BlockParams& bp);
std::int64_t stochastic_block_float(const BlockParams& bp, int mode, float* w, const float* u,
                                    const std::uint32_t* words, unsigned char* flags, std::int64_t len,
                                    BlockCounts& counts);
// bp.sr_fp32_lanes must hold.
std::int64_t stochastic_block_integer(const BlockParams& bp, int mode, float* w, const float* u,
                                      const std::uint32_t* words, unsigned char* flags, std::int64_t len,
                                      BlockCounts& counts);
// Philox groups g0 .. g0 + groups - 1 rounded up to a multiple of 16: out needs room for 4 * that many words.
void philox_groups(std::uint32_t k0, std::uint32_t k1, std::uint32_t step, std::uint32_t tensor, std::uint64_t g0,
                   std::int64_t groups, std::uint32_t* out);
}  // namespace avx2

// ---- One block of the write-back kernel (writeback.cpp), for the precision layer's other kernels ----
// Which nearest loop a format runs: fp32 lanes (floating formats; intK where fp32_lanes_cover) or fp64 lanes.
enum class BlockLanes { fp32_float, fp32_integer, fp64 };
BlockLanes block_lanes(const FormatParams& p);

// What a write-back of blocks needs, derived once per launch: the format, its loop constants, the policy, the key.
struct BlockWriteback {
  FormatParams p;
  BlockParams bp;
  BlockLanes lanes = BlockLanes::fp64;
  WritebackPolicy policy;
  RngKey key;
};
BlockWriteback block_writeback(const FormatParams& p, const WritebackPolicy& policy, const RngKey& key);

// One block's counts added to a kernel's WritebackCounts (writeback.hpp).
template <class Counts>
inline void add_block_counts(Counts& c, const BlockCounts& bc) {
  c.nonzero += bc.nonzero;
  c.erased += bc.erased;
  c.applied += bc.applied;
  c.saturated += bc.saturated;
  c.sr_applied += bc.random;
  c.sr_truncated += bc.truncated;
}

// w <- q^policy(w + u) in place for one block of len <= kWritebackBlock coordinates, the first of which is coordinate
// `first` of its tensor (the RNG counter), exactly as the write-back kernel computes it: the vectorized loop, then
// writeback_value for the coordinates it flags. Coordinates whose w or u is NaN/inf are left unchanged and out of the
// counts (BlockCounts::random and ::truncated: SR's sr_applied and sr_truncated); returns how many there are.
std::int64_t writeback_block(const BlockWriteback& wb, std::uint64_t first, float* w, const float* u, std::int64_t len,
                             BlockCounts& counts);

}  // namespace wbaudit::sim::detail
