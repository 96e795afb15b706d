#include "forecast/joint_grid.hpp"
#include "stats/error.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <bit>
#include <boost/math/special_functions/beta.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "forecast/error.hpp"
#include "sim/precision/rounding.hpp"
#include "sim/precision/storage_format.hpp"
#include "sim/precision/writeback.hpp"
#include "sim/trace/block_sample.hpp"
#include "sim/trace/joint_histogram.hpp"

namespace wbaudit::forecast {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

// 2^k for k in [-1022, 1023] (every exponent the grid meets), and floor(log2 v) for v > 0 normal or v == 0 (-1023):
// exact bit constructions, cheaper than std::ldexp and std::ilogb.
inline double pow2(int k) {
  return std::bit_cast<double>(static_cast<std::uint64_t>(k + 1023) << 52);
}
inline int exponent_of(double v) {
  return static_cast<int>((std::bit_cast<std::uint64_t>(v) >> 52) & 0x7ffu) - 1023;
}
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Round to the nearest integer, ties to even, for 0 <= x < 2^52 (the default rounding mode, as std::nearbyint, which
// is a library call here): adding 2^52 leaves no fraction bits, so the sum is rounded to an integer by the addition.
inline double nearest_integer(double x) {
  constexpr double k = 0x1p52;
  return (x + k) - k;
}

// Nearest rounding of a magnitude into a format, written from the format's definition (docs/formats.md), not with
// sim/precision's kernels: values of a binade e >= emin are multiples of 2^(e - M), below min normal multiples of
// the smallest subnormal 2^(emin - M); everything at or above max finite saturates to it; ties to the even level.
// intK: multiples of the scale up to int_max_level * scale.
struct Rounder {
  bool integer = false;
  int man_bits = 0;
  int emin = 0;
  double max_finite = 0;
  double min_sub = 0;
  double scale = 1;

  explicit Rounder(const sim::FormatSpec& f) {
    integer = f.kind == sim::FormatKind::integer;
    max_finite = f.max_finite;
    if (integer) {
      scale = static_cast<double>(f.int_scale);
      if (!(scale > 0) || !std::isfinite(scale)) {
        throw ForecastError("analytic grid: format \"" + std::string(f.name) + "\" has scale " +
                            stats::value_text(scale));
      }
    } else {
      if (!f.subnormals) {
        throw ForecastError("analytic grid: format \"" + std::string(f.name) +
                            "\" has no subnormals (sim/precision rounds every format with them)");
      }
      man_bits = f.man_bits;
      emin = 1 - f.bias;
      min_sub = pow2(emin - man_bits);
    }
  }
  // The spacing of the grid at and above v (v representable, v < max finite).
  double unit(double v) const {
    if (integer) {
      return scale;
    }
    if (v == 0) {
      return min_sub;
    }
    return pow2(std::max(exponent_of(v), emin) - man_bits);
  }
  // 1 / unit(v) for a floating format: a power of two, so v * inv_unit(v) is exactly v / unit(v).
  double inv_unit(double v) const {
    if (v == 0) {
      return pow2(man_bits - emin);
    }
    return pow2(man_bits - std::max(exponent_of(v), emin));
  }
  double round(double v) const {
    if (v >= max_finite) {
      return max_finite;
    }
    // v < max finite: v / scale and v / unit(v) lie below 2^(M + 2) or the largest level.
    if (integer) {
      return std::min(nearest_integer(v / scale) * scale, max_finite);
    }
    return std::min(nearest_integer(v * inv_unit(v)) * unit(v), max_finite);
  }
  double gap_toward(double v) const {
    if (integer || v == 0) {
      return unit(v);
    }
    const int e = exponent_of(v);
    const double g = unit(v);
    return (e > emin && v == pow2(e)) ? g / 2 : g;  // binade edge: half the gap below 2^e
  }
  double gap_away(double v) const { return v >= max_finite ? kInf : unit(v); }
  // At a tie the even level wins: an update of exactly half a gap is erased iff v's level is even.
  double tie_weight(double v) const {
    if (integer) {
      return std::fmod(v / scale, 2.0) == 0 ? 1.0 : 0.0;
    }
    const double level = v * inv_unit(v);  // an integer below 2^(M+2): halving it is exact
    return std::floor(level * 0.5) == level * 0.5 ? 1.0 : 0.0;
  }
};

struct Piece {
  double share = 1;
  double gap_toward = 0;
  double gap_away = 0;
  double tie = 0;    // weight of an update of exactly half a gap
  double value = 0;  // q(w) (the piece of several levels: the bin's middle)
};

Piece piece_of(const Rounder& r, double share, double wq) {
  return Piece{share, r.gap_toward(wq), r.gap_away(wq), r.tie_weight(wq), wq};
}

// The q(w) profile of a w bin: one piece when every w of the bin rounds to the same value, else the shares
// (uniform in w) rounding to the special values 0, powers of two and max finite, and the rest with the binade's
// gap on both sides and ties weighted 1/2 (their levels alternate).
// Returns true when every w of the bin rounds to one level (the one piece then has share 1 and value q(w)).
bool pieces_of(const Rounder& r, double lo, double hi, bool point, std::vector<Piece>& out) {
  out.clear();
  if (point) {
    out.push_back(piece_of(r, 1, r.round(lo)));
    return true;
  }
  const double eps = (hi - lo) * 0x1p-30;
  const double a = r.round(lo + eps), b = r.round(hi - eps);
  if (a == b) {
    out.push_back(piece_of(r, 1, a));
    return true;
  }
  double special[64];
  int n = 0;
  special[n++] = 0;
  special[n++] = r.max_finite;
  if (!r.integer) {
    const int k0 = a > 0 ? exponent_of(a) : exponent_of(r.min_sub), k1 = exponent_of(b) + 1;
    for (int k = k0; k <= k1 && n < 64; ++k) {
      special[n++] = pow2(k);
    }
  }
  std::sort(special, special + n);
  n = static_cast<int>(std::unique(special, special + n) - special);
  double rest = 1;
  for (int i = 0; i < n; ++i) {
    const double v = special[i];
    if (v < a || v > b) {
      continue;
    }
    const double from = v == 0 ? 0.0 : v - r.gap_toward(v) / 2;
    const double to = v >= r.max_finite ? kInf : v + r.gap_away(v) / 2;
    const double share = std::max(0.0, std::min(hi, to) - std::max(lo, from)) / (hi - lo);
    if (share > 0) {
      out.push_back(piece_of(r, share, v));
      rest -= share;
    }
  }
  if (rest > 1e-12) {
    const double g = r.unit(0.5 * (lo + hi));
    out.push_back(Piece{rest, g, g, 0.5, 0.5 * (lo + hi)});
  }
  return false;
}

// The |u| entries of one w bin and one direction, in increasing order (a point bin sorts before the interval above
// it): views into the step's flat entry arrays (StepBins), so that a step's parse allocates a few arrays, not a few
// per w bin.
struct UEntries {
  std::span<const double> lo, hi, count;
  std::span<const char> point;
  std::span<const std::uint32_t> idx;  // the entry's |u| bin: code * 2 + sticky
};

struct WBin {
  double lo = 0, hi = 0;
  bool point = false;
  UEntries dir[2];  // [0] away from zero (or w == 0), [1] toward zero
};

struct Entries {
  std::vector<double> lo, hi, count;
  std::vector<char> point;
  std::vector<std::uint32_t> idx;
};

struct StepBins {
  std::vector<WBin> bins;
  Entries entries[2];  // by direction; a w bin's entries of one direction are contiguous
};

StepBins parse(const sim::JointHistogramLayout& layout, std::span<const std::uint64_t> keys,
               std::span<const std::int64_t> counts, double& total) {
  if (keys.size() != counts.size()) {
    throw ForecastError("analytic grid: " + std::to_string(keys.size()) + " keys but " + std::to_string(counts.size()) +
                        " counts");
  }
  // u_bits <= 6: the grid's dense per-gap slots hold 2^(9 + u_bits) |u| bins (wbaudit records u_bits = 4).
  if (layout.w_bits < 0 || layout.w_bits > 12 || layout.u_bits < 0 || layout.u_bits > 6) {
    throw ForecastError("analytic grid: joint histogram layout w_bits " + std::to_string(layout.w_bits) + ", u_bits " +
                        std::to_string(layout.u_bits) + " (expected w_bits 0..12, u_bits 0..6)");
  }
  StepBins out;
  std::vector<std::array<std::size_t, 4>> ranges;  // per w bin: begin/end of direction 0, then of direction 1
  for (auto& e : out.entries) {
    e.lo.reserve(keys.size());
    e.hi.reserve(keys.size());
    e.count.reserve(keys.size());
    e.point.reserve(keys.size());
    e.idx.reserve(keys.size());
  }
  total = 0;
  const int wshift = 11 + layout.u_bits;
  std::uint64_t current = ~std::uint64_t{0};
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (i > 0 && keys[i] <= keys[i - 1]) {
      throw ForecastError("analytic grid: joint histogram keys not strictly increasing at entry " + std::to_string(i));
    }
    if (counts[i] <= 0) {
      throw ForecastError("analytic grid: joint histogram count " + std::to_string(counts[i]) + " at entry " +
                          std::to_string(i));
    }
    const sim::JointBin b = sim::decode_joint_key(layout.w_bits, layout.u_bits, keys[i]);
    if ((keys[i] >> wshift) != current) {
      current = keys[i] >> wshift;
      WBin w;
      sim::joint_bin_range(layout.w_bits, b.w_code, w.lo, w.hi);
      w.point = !b.w_sticky;
      out.bins.push_back(w);
      const std::size_t n0 = out.entries[0].lo.size(), n1 = out.entries[1].lo.size();
      ranges.push_back({n0, n0, n1, n1});
    }
    double ulo, uhi;
    sim::joint_bin_range(layout.u_bits, b.u_code, ulo, uhi);
    const int d = b.toward ? 1 : 0;
    Entries& e = out.entries[d];
    e.lo.push_back(ulo);
    e.hi.push_back(uhi);
    e.count.push_back(static_cast<double>(counts[i]));
    e.point.push_back(!b.u_sticky);
    e.idx.push_back(b.u_code * 2u + (b.u_sticky ? 1u : 0u));
    ranges.back()[2 * d + 1] = e.lo.size();
    total += static_cast<double>(counts[i]);
  }
  for (std::size_t k = 0; k < out.bins.size(); ++k) {
    for (int d = 0; d < 2; ++d) {
      const Entries& e = out.entries[d];
      const std::size_t from = ranges[k][2 * std::size_t(d)], n = ranges[k][2 * std::size_t(d) + 1] - from;
      out.bins[k].dir[d] =
          UEntries{std::span<const double>(e.lo).subspan(from, n), std::span<const double>(e.hi).subspan(from, n),
                   std::span<const double>(e.count).subspan(from, n), std::span<const char>(e.point).subspan(from, n),
                   std::span<const std::uint32_t>(e.idx).subspan(from, n)};
    }
  }
  return out;
}

void check_scale(double s) {
  if (!(s > 0) || !std::isfinite(s)) {
    throw ForecastError("analytic grid: learning-rate scale " + stats::value_text(s) + " (must be finite and > 0)");
  }
}

// Erased counts of one step for every scale, given the format's pieces per w bin. Every (piece, direction) of every
// w bin sends its |u| entries, weighted by the piece's share, to the slot of its (gap, tie), where entries of the
// same |u| bin add up (a step's w bins share a few dozen gaps and a few thousand |u| bins); then each slot's |u| bins
// are evaluated for every scale, the threshold t_k = gap / (2 s_k): a point bin counts 1 below t, `tie` at t; an
// interval bin the uniform fraction (t - lo) / (hi - lo) clamped to [0, 1] (bins are sorted and do not overlap).
struct GapSlot {
  double gap = 0, tie = 0;
  std::vector<double> weight;          // by |u| bin index
  std::vector<std::uint32_t> touched;  // indices with weight > 0
};

class Aggregator {
 public:
  explicit Aggregator(int u_bits) : m_u_bits(u_bits), m_size(std::size_t{1} << (9 + u_bits)) {}

  void run(const std::vector<WBin>& bins, const Rounder& r, std::span<const double> twice_scales,
           std::vector<Piece>& pieces, double* out) {
    // A w bin strictly inside the rounding cell of the previous bin's single level (by a margin far above the
    // rounding error of v / scale) has the same one piece: w bins are sorted and a cell spans 2^(11 - M) of them.
    double cell_lo = 0, cell_hi = -1;
    for (const WBin& w : bins) {
      const double eps = w.point ? 0.0 : (w.hi - w.lo) * 0x1p-30;
      if (!(w.lo + eps > cell_lo && w.hi - eps < cell_hi)) {
        if (pieces_of(r, w.lo, w.hi, w.point, pieces)) {
          const Piece& p = pieces[0];
          const double margin = p.gap_toward * 0x1p-20;
          cell_lo = p.value == 0 ? -1.0 : p.value - p.gap_toward / 2 + margin;
          cell_hi = p.value + p.gap_away / 2 - margin;  // inf at max finite
        } else {
          cell_lo = 0;
          cell_hi = -1;
        }
      }
      for (const Piece& p : pieces) {
        for (int d = 0; d < 2; ++d) {
          const UEntries& c = w.dir[d];
          if (c.lo.empty()) {
            continue;
          }
          GapSlot& slot = slot_of(d == 0 ? p.gap_away : p.gap_toward, p.tie);
          for (std::size_t e = 0; e < c.lo.size(); ++e) {
            double& x = slot.weight[c.idx[e]];
            if (x == 0) {
              slot.touched.push_back(c.idx[e]);
            }
            x += p.share * c.count[e];
          }
        }
      }
    }
    const std::size_t S = twice_scales.size();
    const double* s2 = twice_scales.data();
    for (std::size_t k = 0; k < S; ++k) {
      out[k] = 0;
    }
    m_thresholds.resize(S);
    double* th = m_thresholds.data();
    for (std::size_t n = 0; n < m_used; ++n) {
      GapSlot& slot = m_slots[n];
      for (std::size_t k = 0; k < S; ++k) {
        th[k] = slot.gap / s2[k];
      }
      for (std::uint32_t i : slot.touched) {
        const double weight = slot.weight[i];
        slot.weight[i] = 0;
        double lo, hi;
        sim::joint_bin_range(m_u_bits, i >> 1, lo, hi);
        if ((i & 1u) == 0) {
          for (std::size_t k = 0; k < S; ++k) {
            const double t = th[k];
            out[k] += weight * (t > lo ? 1.0 : t == lo ? slot.tie : 0.0);
          }
        } else {
          const double inv = 1.0 / (hi - lo);
          for (std::size_t k = 0; k < S; ++k) {
            const double f = (th[k] - lo) * inv;
            out[k] += weight * (f >= 1.0 ? 1.0 : f > 0.0 ? f : 0.0);
          }
        }
      }
      slot.touched.clear();
    }
    m_used = 0;
  }

 private:
  GapSlot& slot_of(double gap, double tie) {
    if (m_last < m_used && m_slots[m_last].gap == gap && m_slots[m_last].tie == tie) {
      return m_slots[m_last];
    }
    for (std::size_t n = 0; n < m_used; ++n) {
      if (m_slots[n].gap == gap && m_slots[n].tie == tie) {
        return m_slots[m_last = n];
      }
    }
    if (m_used == m_slots.size()) {
      m_slots.emplace_back().weight.assign(m_size, 0.0);
    }
    GapSlot& slot = m_slots[m_last = m_used++];
    slot.gap = gap;
    slot.tie = tie;
    return slot;
  }

  int m_u_bits;
  std::size_t m_size;
  std::vector<GapSlot> m_slots;      // [0, m_used) in use for the current step; weights kept zeroed
  std::vector<double> m_thresholds;  // a slot's t_k
  std::size_t m_used = 0, m_last = 0;
};

// A small group's step counted coordinate by coordinate from the w and u the reference kept (GroupTrace::exact_w,
// exact_u): erased iff q(q(w) + fl(s u)) == q(w) under nearest, with sim/precision's own rounding and write-back, so
// at s = 1 this is the trace's exact projection. erased[f * S + s]; returns the proposals counted.
double exact_erased_counts(const sim::GroupTrace& g, std::size_t t, std::span<const sim::FormatParams> formats,
                           std::span<const double> lr_scales, std::vector<double>& erased) {
  const auto n = static_cast<std::size_t>(g.size);
  const std::size_t S = lr_scales.size();
  erased.assign(formats.size() * S, 0.0);
  double total = 0;
  for (std::size_t i = t * n; i < (t + 1) * n; ++i) {
    const float u = g.exact_u[i];
    if (u == 0.0f) {
      continue;
    }
    total += 1;
    for (std::size_t f = 0; f < formats.size(); ++f) {
      const auto wq = static_cast<float>(sim::round_nearest(formats[f], static_cast<double>(g.exact_w[i])));
      for (std::size_t s = 0; s < S; ++s) {
        const auto us = static_cast<float>(lr_scales[s] * static_cast<double>(u));
        const float after = sim::writeback_value(formats[f], sim::WritebackPolicy{}, sim::RngKey{}, 0, wq, us).value;
        erased[f * S + s] += after == wq ? 1.0 : 0.0;
      }
    }
  }
  return total;
}

// The share of a fine sub-bin's `count` proposals whose position x in it (m = lo + x / kMarginSubBins) is below t in
// (0, 1), from the moments of p = floor(2^7 x) (schema 4): x taken as p + 1/2 plus a uniform quantum's spread, then a
// Beta law with x's mean mu and variance v (alpha + beta = mu (1 - mu) / v - 1). A point mass (v = the quantum's) is a
// narrow Beta around it, so a threshold outside its quantum counts it whole or not at all; a uniform sub-bin gives
// Beta(1, 1), t itself; where the variance leaves no Beta (all mass at the two ends), the two-point law 1 - mu.
double moment_share(std::int64_t count, std::int64_t sum_p, std::int64_t sum_p2, double t) {
  const double n = static_cast<double>(count), q = 0x1p7;
  const double mean_p = static_cast<double>(sum_p) / n;
  const double var_p = std::max(0.0, static_cast<double>(sum_p2) / n - mean_p * mean_p);  // p < 2^7: error ~1e-11
  const double mu = (mean_p + 0.5) / q, var = (var_p + 1.0 / 12) / (q * q);
  const double nu = mu * (1 - mu) / var - 1;
  if (!(nu > 1e-9)) {
    return 1 - mu;
  }
  return boost::math::ibeta(mu * nu, (1 - mu) * nu, t);
}

// The count erased at learning-rate scale s from one format's block of the margin histogram
// (sim/trace/margin_histogram.hpp): a proposal in row kappa with m in [1, 2) is erased iff kappa + log2 m + log2 s < 0,
// a point (m = 1) at equality iff q(w)'s level is even, and a saturating proposal always. For s = 2^k every row is
// decided whole (exact); otherwise the row kappa = -floor(log2 s) - 1 is decided by m < 2^(1 - frac(log2 s)), its
// sub-bins counted whole or, for the one holding the threshold, by the share below it: from the sub-bin's moments
// (`moments`, the format's moment block, schema 4: moment_share) or uniform in m (nullptr: schema 3).
double margin_erased_count(const sim::MarginRows& r, const std::int64_t* block, const std::int64_t* moments,
                           double lr_scale) {
  int e = 0;
  const double mantissa = std::frexp(lr_scale, &e);  // s = mantissa 2^e, mantissa in [0.5, 1)
  const bool power = mantissa == 0.5;
  const int k = power ? e - 1 : static_cast<int>(std::floor(std::log2(lr_scale)));
  const double tau = power ? 1.0 : std::exp2(1.0 - (std::log2(lr_scale) - k));  // m below tau in the boundary row
  double erased = static_cast<double>(block[sim::kMarginSaturated]);
  for (int row = 0; row < r.rows(); ++row) {
    const int kappa = row + r.coarse_lo - 1;  // the first and last rows stand for every kappa beyond
    const std::int64_t* c = block + r.row_offset(row);
    const bool fine = r.fine(kappa);
    const int points = fine ? sim::kMarginSubBins : 1;
    const double even = static_cast<double>(c[points]), odd = static_cast<double>(c[points + 1]);
    double interval = 0;
    for (int j = 0; j < points; ++j) {
      interval += static_cast<double>(c[j]);
    }
    if (kappa + k <= -2 || (power && kappa + k <= -1)) {
      erased += interval + even + odd;
    } else if (kappa + k == -1) {  // not a power of two: the boundary row, whose points are below the threshold
      if (!fine) {
        throw ForecastError("analytic grid: scale " + std::to_string(lr_scale) + " needs a fine row");
      }
      erased += even + odd;
      for (int j = 0; j < sim::kMarginSubBins; ++j) {
        const double lo = 1.0 + j / static_cast<double>(sim::kMarginSubBins), hi = lo + 1.0 / sim::kMarginSubBins;
        double share = tau >= hi ? 1.0 : (tau <= lo ? 0.0 : (tau - lo) * sim::kMarginSubBins);
        if (moments != nullptr && share > 0 && share < 1 && c[j] > 0) {
          const std::int64_t* m = moments + r.moment_offset(kappa, j);
          share = moment_share(c[j], m[0], m[1], share);
        }
        erased += share * static_cast<double>(c[j]);
      }
    } else if (power && kappa + k == 0) {
      erased += even;
    }
  }
  return erased;
}

// The scales a margin histogram decides (see margin_erased_count); throws ForecastError naming the scale otherwise.
void check_margin_scale(const sim::MarginRows& r, double lr_scale) {
  int e = 0;
  const bool power = std::frexp(lr_scale, &e) == 0.5;
  const int k = power ? e - 1 : static_cast<int>(std::floor(std::log2(lr_scale)));
  const bool ok = power ? (k >= -r.coarse_hi && k <= -r.coarse_lo) : (k >= -r.fine_hi - 1 && k <= -r.fine_lo - 1);
  if (!ok) {
    throw ForecastError("analytic grid: learning-rate scale " + std::to_string(lr_scale) +
                        " is outside what this trace's margin histogram resolves (powers of two 2^" +
                        std::to_string(-r.coarse_hi) + " .. 2^" + std::to_string(-r.coarse_lo) +
                        ", other scales in [2^" + std::to_string(-r.fine_hi - 1) + ", 2^" + std::to_string(-r.fine_lo) +
                        "))");
  }
}

}  // namespace

sim::FormatSpec grid_format(const sim::GroupTrace& group, std::string_view name) {
  sim::FormatSpec f;
  try {
    f = sim::format_from_name(name);
    if (f.kind == sim::FormatKind::integer) {
      const int k = std::stoi(std::string(name.substr(3)));
      f = sim::int_format(k, sim::int_scale_for_absmax(k, group.init_absmax));
    }
  } catch (const sim::FormatError& e) {
    throw ForecastError("analytic grid: group \"" + group.name + "\" format \"" + std::string(name) +
                        "\": " + e.what());
  }
  return f;
}

double joint_erased_count(const sim::JointHistogramLayout& layout, std::span<const std::uint64_t> keys,
                          std::span<const std::int64_t> counts, const sim::FormatSpec& format, double lr_scale) {
  check_scale(lr_scale);
  const Rounder r(format);
  double total = 0;
  const auto bins = parse(layout, keys, counts, total);
  std::vector<Piece> pieces;
  double out = 0;
  const double twice = 2.0 * lr_scale;  // exact
  Aggregator(layout.u_bits).run(bins.bins, r, std::span<const double>(&twice, 1), pieces, &out);
  return out;
}

void joint_pairs(const sim::JointHistogramLayout& layout, std::span<const float> w, std::span<const float> u,
                 std::vector<std::uint64_t>& keys, std::vector<std::int64_t>& counts) {
  if (w.size() != u.size()) {
    throw ForecastError("joint_pairs: w and u differ in length");
  }
  std::vector<std::uint64_t> all;
  all.reserve(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (u[i] != 0.0f) {
      all.push_back(sim::joint_key(layout.w_bits, layout.u_bits, w[i], u[i]));
    }
  }
  std::sort(all.begin(), all.end());
  keys.clear();
  counts.clear();
  for (std::size_t i = 0; i < all.size();) {
    std::size_t j = i;
    while (j < all.size() && all[j] == all[i]) {
      ++j;
    }
    keys.push_back(all[i]);
    counts.push_back(static_cast<std::int64_t>(j - i));
    i = j;
  }
}

void require_joint_histogram(const sim::Trace& reference, const sim::GroupTrace& group) {
  if (reference.mode != "reference") {
    throw ForecastError("analytic grid: the trace is a \"" + reference.mode +
                        "\" trace; the grid needs an fp32 reference trace (mode = \"reference\")");
  }
  if (!group.has_joint()) {
    throw ForecastError("analytic grid: group \"" + group.name + "\" of this " + reference.schema +
                        " trace has no joint histogram (a schema-1 trace, or one written without it); regenerate the "
                        "reference with this wbaudit (schema " +
                        sim::kTraceSchema +
                        "): `wbaudit run SPEC --resume` after removing the reference's run directory, or a fresh "
                        "`wbaudit run SPEC -o NEWDIR`");
  }
  if (group.has_pairs() && group.joint_offsets.size() != reference.recorded_steps.size() + 1) {
    throw ForecastError("analytic grid: group \"" + group.name + "\" joint histogram has " +
                        std::to_string(group.joint_offsets.size()) + " offsets for " +
                        std::to_string(reference.recorded_steps.size()) + " recorded steps");
  }
  if (group.has_margin() && group.margin.size() != reference.recorded_steps.size() * reference.margin.bins()) {
    throw ForecastError("analytic grid: group \"" + group.name + "\" margin histogram has " +
                        std::to_string(group.margin.size()) + " counters for " +
                        std::to_string(reference.recorded_steps.size()) + " recorded steps of " +
                        std::to_string(reference.margin.bins()));
  }
}

namespace {

// One grid computation: the formats and scales, how each format is evaluated, and the output.
struct GridPlan {
  const sim::Trace* header;               // the reference (its rows need not be present)
  const sim::GroupTrace* group;           // name, size, init absmax
  std::vector<Rounder> rounders;          // schema 2 (pairs)
  std::vector<sim::FormatParams> params;  // groups kept exactly
  std::vector<int> margin_block;          // schema 3: each format's block (-1: not recorded)
  std::vector<double> twice;              // 2 s per scale
  FormatGrid grid;
};

GridPlan plan_grid(const sim::Trace& reference, const sim::GroupTrace& g, std::span<const std::string> formats,
                   std::span<const double> lr_scales, bool margin) {
  if (formats.empty() || lr_scales.empty()) {
    throw ForecastError("format_grid: empty format or learning-rate list");
  }
  for (double s : lr_scales) {
    check_scale(s);
    if (margin && !g.has_exact()) {
      check_margin_scale(reference.margin.rows, s);
    }
  }
  GridPlan plan{&reference, &g, {}, {}, {}, {}, {}};
  FormatGrid& grid = plan.grid;
  grid.undefined.assign(formats.size(), std::string());
  for (std::size_t f = 0; f < formats.size(); ++f) {
    // intK takes its scale from the group's absmax at initialization; a group that started all zeros (a bias, a
    // norm's shift) has none, as in the simulator, which refuses such a target: its values stay NaN, with the reason.
    const bool no_scale = !(g.init_absmax > 0 && std::isfinite(g.init_absmax));
    sim::FormatSpec spec;
    if (no_scale && sim::format_from_name(formats[f]).kind == sim::FormatKind::integer) {
      grid.undefined[f] = "no per-tensor scale (max |w| at initialization is " + stats::value_text(g.init_absmax) + ")";
      spec = sim::int_format(std::stoi(formats[f].substr(3)), 1.0f);  // a placeholder: its values stay NaN
    } else {
      spec = grid_format(g, formats[f]);
    }
    if (margin) {
      const auto& names = reference.margin.formats;
      const auto it = std::find(names.begin(), names.end(), formats[f]);
      if (it == names.end() && !g.has_exact()) {
        std::string known;
        for (const auto& n : names) {
          known += (known.empty() ? "" : ", ") + n;
        }
        throw ForecastError("analytic grid: format \"" + formats[f] + "\" is not in this trace's margin histogram (" +
                            known + ")");
      }
      plan.margin_block.push_back(it == names.end() ? -1 : static_cast<int>(it - names.begin()));
    } else {
      plan.rounders.emplace_back(spec);
    }
    plan.params.push_back(sim::format_params(spec));
  }
  grid.group = g.name;
  grid.formats.assign(formats.begin(), formats.end());
  grid.lr_scales.assign(lr_scales.begin(), lr_scales.end());
  grid.steps = reference.recorded_steps;
  grid.values.assign(formats.size() * lr_scales.size() * grid.steps.size(), kNaN);
  for (double s : lr_scales) {
    plan.twice.push_back(2.0 * s);  // exact
  }
  return plan;
}

// Step t's values from that step's rows (`rows`: a GroupTrace holding exactly one recorded step).
void grid_step(GridPlan& plan, std::size_t t, const sim::GroupTrace& rows, Aggregator& aggregator) {
  FormatGrid& grid = plan.grid;
  const sim::GroupTrace& g = *plan.group;
  const std::size_t T = grid.steps.size(), S = grid.lr_scales.size();
  const std::string at = "analytic grid: group \"" + g.name + "\" step " + std::to_string(grid.steps[t]) + ": ";
  const auto check_total = [&](double total, const char* what) {
    if (!rows.nonzero.empty() && static_cast<double>(rows.nonzero[0]) != total) {
      throw ForecastError(at + what + " " + std::to_string(total) + " proposals but nonzero is " +
                          std::to_string(rows.nonzero[0]));
    }
  };
  if (rows.has_exact()) {
    std::vector<double> erased;
    const double total = exact_erased_counts(rows, 0, plan.params, grid.lr_scales, erased);
    check_total(total, "its kept coordinates hold");
    if (total == 0) {
      return;
    }
    for (std::size_t k = 0; k < erased.size(); ++k) {  // k = f S + s
      if (grid.undefined[k / S].empty()) {
        grid.values[k * T + t] = erased[k] / total;
      }
    }
    return;
  }
  if (rows.has_margin()) {
    const sim::MarginRows& r = plan.header->margin.rows;
    const std::size_t block = static_cast<std::size_t>(r.block());
    for (std::size_t f = 0; f < grid.formats.size(); ++f) {
      if (!grid.undefined[f].empty()) {
        continue;
      }
      const std::int64_t* c = rows.margin.data() + static_cast<std::size_t>(plan.margin_block[f]) * block;
      double total = 0;
      for (std::size_t b = 0; b < block; ++b) {
        total += static_cast<double>(c[b]);
      }
      check_total(total, ("the margin histogram of " + grid.formats[f] + " holds").c_str());
      if (total == 0) {
        continue;
      }
      const sim::MarginLayout& layout = plan.header->margin;
      const std::int64_t* moments =
          layout.moments ? rows.margin.data() + layout.moments_begin() +
                               static_cast<std::size_t>(plan.margin_block[f]) * static_cast<std::size_t>(r.moments())
                         : nullptr;
      for (std::size_t s = 0; s < S; ++s) {
        grid.values[(f * S + s) * T + t] = margin_erased_count(r, c, moments, grid.lr_scales[s]) / total;
      }
    }
    return;
  }
  double total = 0;
  const auto bins = parse(plan.header->joint, rows.joint_keys, rows.joint_counts, total);
  check_total(total, "joint histogram holds");
  if (total == 0) {
    return;
  }
  std::vector<Piece> pieces;
  std::vector<double> erased(S);
  for (std::size_t f = 0; f < grid.formats.size(); ++f) {
    if (!grid.undefined[f].empty()) {
      continue;
    }
    aggregator.run(bins.bins, plan.rounders[f], plan.twice, pieces, erased.data());
    for (std::size_t s = 0; s < S; ++s) {
      grid.values[(f * S + s) * T + t] = erased[s] / total;
    }
  }
}

// Runs grid_step over the steps, `rows_of(first, count)` giving the rows of a block of steps (called on this thread
// only: HDF5 is not thread-safe); blocks of `workers` steps, each step whole on one thread (the same operations in
// the same order at any thread count), an error carried out of the parallel loop and thrown after it.
template <class RowsOf>
void run_grid(GridPlan& plan, const RowsOf& rows_of) {
  const std::size_t T = plan.grid.steps.size();
  const std::size_t workers =
      Kokkos::is_initialized()
          ? std::max<std::size_t>(1, static_cast<std::size_t>(Kokkos::DefaultHostExecutionSpace().concurrency()))
          : 1;
  const int u_bits = plan.header->joint.u_bits;
  std::vector<Aggregator> aggregators;
  for (std::size_t w = 0; w < workers; ++w) {
    aggregators.emplace_back(u_bits);
  }
  std::vector<std::string> errors(workers);
  for (std::size_t first = 0; first < T; first += workers) {
    const std::size_t count = std::min(workers, T - first);
    const std::vector<sim::GroupTrace> block = rows_of(first, count);
    auto one = [&](std::size_t w) {
      try {
        grid_step(plan, first + w, block[w], aggregators[w]);
      } catch (const std::exception& e) {
        if (errors[w].empty()) {
          errors[w] = e.what();
        }
      }
    };
    if (count > 1) {
      Kokkos::parallel_for("wbaudit::forecast::format_grid::steps",
                           Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, static_cast<std::int64_t>(count)),
                           [&](const std::int64_t w) { one(static_cast<std::size_t>(w)); });
      Kokkos::fence();
    } else {
      one(0);
    }
    for (const auto& e : errors) {
      if (!e.empty()) {
        throw ForecastError(e);
      }
    }
  }
}

// Row t of g, a group's rows from recorded step index `first` on (first 0: every step of an in-memory trace), as a
// one-step GroupTrace.
sim::GroupTrace rows_at(const sim::Trace& trace, const sim::GroupTrace& g, std::size_t t, std::size_t first = 0) {
  sim::GroupTrace r;
  r.name = g.name;
  r.size = g.size;
  r.init_absmax = g.init_absmax;
  if (t < g.nonzero.size()) {
    r.nonzero = {g.nonzero[t]};
  }
  if (g.has_exact()) {
    const auto n = static_cast<std::size_t>(g.size);
    r.exact_w.assign(g.exact_w.begin() + static_cast<std::ptrdiff_t>(t * n),
                     g.exact_w.begin() + static_cast<std::ptrdiff_t>((t + 1) * n));
    r.exact_u.assign(g.exact_u.begin() + static_cast<std::ptrdiff_t>(t * n),
                     g.exact_u.begin() + static_cast<std::ptrdiff_t>((t + 1) * n));
  } else if (g.has_margin()) {
    const std::size_t bins = trace.margin.bins();
    r.margin.assign(g.margin.begin() + static_cast<std::ptrdiff_t>(t * bins),
                    g.margin.begin() + static_cast<std::ptrdiff_t>((t + 1) * bins));
  } else {
    const auto begin = static_cast<std::size_t>(g.joint_offsets[t]),
               end = static_cast<std::size_t>(g.joint_offsets[t + 1]);
    if (end < begin || end > g.joint_keys.size() || end > g.joint_counts.size()) {
      throw ForecastError("analytic grid: group \"" + g.name + "\" step " +
                          std::to_string(trace.recorded_steps[first + t]) + ": joint offsets out of order");
    }
    r.joint_offsets = {0, static_cast<std::int64_t>(end - begin)};
    r.joint_keys.assign(g.joint_keys.begin() + static_cast<std::ptrdiff_t>(begin),
                        g.joint_keys.begin() + static_cast<std::ptrdiff_t>(end));
    r.joint_counts.assign(g.joint_counts.begin() + static_cast<std::ptrdiff_t>(begin),
                          g.joint_counts.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return r;
}

// ---- Block-scaled formats: the reference's block sample projected at each scale (sim/trace/block_sample.hpp) ----

// The block formats among `formats`, with their positions.
struct BlockFormats {
  std::vector<std::size_t> at;  // index into the grid's formats
  std::vector<sim::BlockFormatSpec> specs;
  std::vector<std::string> names;
  std::vector<std::string> others;  // the per-tensor formats, in order
};

BlockFormats split_formats(std::span<const std::string> formats) {
  BlockFormats b;
  for (std::size_t f = 0; f < formats.size(); ++f) {
    if (!sim::is_block_storage_name(formats[f])) {
      b.others.push_back(formats[f]);
      continue;
    }
    const sim::StorageFormat storage = sim::storage_format_from_name(formats[f]);
    b.at.push_back(f);
    b.specs.push_back(storage.blocks);
    b.names.push_back(formats[f]);
  }
  return b;
}

// Throws ForecastError when `g` has no block sample for `format`, or a scale the sample cannot decide.
void require_block_sample(const sim::Trace& reference, const sim::GroupTrace& g, const std::string& format,
                          const sim::BlockFormatSpec& spec, std::span<const double> lr_scales) {
  if (reference.mode != "reference") {
    throw ForecastError("analytic grid: the trace is a \"" + reference.mode +
                        "\" trace; the grid needs an fp32 reference trace (mode = \"reference\")");
  }
  const auto it = g.projected.find(format);
  if (it == g.projected.end() || it->second.block_sample.empty()) {
    throw ForecastError(
        "analytic grid: this reference has no block sample for " + format + " (group \"" + g.name + "\"): " +
        (it == g.projected.end() ? std::string("the reference does not project ") + format
                                 : std::string("the trace was written before block samples (wbaudit issue 29)")) +
        "; block formats are forecast from the sample a reference records for each block format it declares: re-run "
        "the reference with this wbaudit and " +
        format + " in [reference] project_formats (a PyTorch reference: in wbaudit.torch.ReferenceRecorder's formats)");
  }
  for (const double s : lr_scales) {
    check_scale(s);
    if (spec.family == sim::BlockFamily::nvfp4 && !(s >= sim::kBlockSampleScaleMin && s <= sim::kBlockSampleScaleMax)) {
      throw ForecastError("analytic grid: learning-rate scale " + stats::value_text(s) + " for " + format +
                          ": an NVFP4 block sample decides scales in [" + stats::value_text(sim::kBlockSampleScaleMin) +
                          ", " + stats::value_text(sim::kBlockSampleScaleMax) +
                          "] (its tensor scale follows the whole tensor's max |q(w) + s u|)");
    }
  }
}

// The block formats' values at recorded steps [first, first + count) from `rows` (a GroupTrace holding exactly those
// steps' rows), written into `grid` (all formats) at the formats' positions.
void block_grid_steps(const BlockFormats& b, const sim::GroupTrace& rows, std::size_t first, std::size_t count,
                      FormatGrid& grid) {
  const std::size_t T = grid.steps.size(), S = grid.lr_scales.size();
  for (std::size_t k = 0; k < b.at.size(); ++k) {
    const sim::ProjectedSeries& series = rows.projected.at(b.names[k]);
    const sim::BlockSample& sample = series.block_sample;
    const sim::BlockEventSeries& recorded = series.block_events;
    const auto project = [&](std::size_t t, double scale) {
      try {
        return sim::project_block_sample(b.specs[k], sample, t, scale);
      } catch (const std::exception& e) {
        throw ForecastError("analytic grid: group \"" + rows.name + "\" format " + b.names[k] + " step " +
                            std::to_string(grid.steps[first + t]) + " scale " + stats::value_text(scale) + ": " +
                            e.what());
      }
    };
    for (std::size_t t = 0; t < count; ++t) {
      // The difference estimator: the sample's fractions at s plus what the sample misses at the anchors around s,
      // scales at which the tensor's exact projection is recorded over every block: s = 1 (erased and its causes)
      // and, for a sampled tensor, the anchor scales (block_sample.hpp). Zero for a tensor sampled whole (the sample
      // is the tensor); for a sampled one it removes the sampling error that s and the anchors share.
      struct Anchor {
        double scale;
        sim::BlockWritebackCounts exact;             // nonzero, erased and the causes over the whole tensor
        std::optional<std::array<double, 4>> shift;  // the exact fractions minus the sample's, once projected
      };
      std::vector<Anchor> anchors;
      if (t < rows.nonzero.size() && t < series.erased.size() && t < recorded.erased_grid.size() &&
          t < recorded.erased_saturation.size() && t < recorded.erased_scale.size()) {
        sim::BlockWritebackCounts one;
        one.nonzero = rows.nonzero[t];
        one.erased = series.erased[t];
        one.erased_grid = recorded.erased_grid[t];
        one.erased_saturation = recorded.erased_saturation[t];
        one.erased_scale = recorded.erased_scale[t];
        anchors.push_back({1.0, one, std::nullopt});
      }
      if ((t + 1) * sample.anchor_scales.size() * sim::kBlockAnchorCounts <= sample.anchors.size()) {
        for (std::size_t a = 0; a < sample.anchor_scales.size(); ++a) {
          anchors.push_back({sample.anchor_scales[a], sim::block_sample_anchor(sample, t, a), std::nullopt});
        }
      }
      const auto fractions = [](const sim::BlockWritebackCounts& c) {
        const auto n = static_cast<double>(c.nonzero);
        return std::array<double, 4>{static_cast<double>(c.erased) / n, static_cast<double>(c.erased_grid) / n,
                                     static_cast<double>(c.erased_saturation) / n,
                                     static_cast<double>(c.erased_scale) / n};
      };
      // The anchors bracketing s, the largest at most s and the smallest at least s (nullptr where none is).
      const auto bracket = [&](double scale) {
        std::pair<Anchor*, Anchor*> out{nullptr, nullptr};
        for (Anchor& a : anchors) {
          if (a.scale <= scale && (out.first == nullptr || a.scale > out.first->scale)) {
            out.first = &a;
          }
          if (a.scale >= scale && (out.second == nullptr || a.scale < out.second->scale)) {
            out.second = &a;
          }
        }
        return out;
      };
      // An anchor's shift: its exact fractions minus the sample's at its scale (projected once per step).
      const auto shift_of = [&](Anchor& a) -> const std::array<double, 4>& {
        if (!a.shift) {
          const sim::BlockWritebackCounts at = project(t, a.scale);
          std::array<double, 4> d{0, 0, 0, 0};
          if (at.nonzero > 0 && a.exact.nonzero > 0) {
            const std::array<double, 4> exact = fractions(a.exact), sampled = fractions(at);
            for (std::size_t j = 0; j < 4; ++j) {
              d[j] = exact[j] - sampled[j];
            }
          }
          a.shift = d;
        }
        return *a.shift;
      };
      const auto share = [](double x) { return std::clamp(x, 0.0, 1.0); };
      for (std::size_t s = 0; s < S; ++s) {
        const double scale = grid.lr_scales[s];
        const std::size_t i = (b.at[k] * S + s) * T + first + t;
        const auto [lo, hi] = bracket(scale);
        Anchor* at = lo != nullptr && lo->scale == scale ? lo : nullptr;
        if (at != nullptr && at->exact.nonzero > 0) {  // at an anchor the grid is the recorded exact projection
          const std::array<double, 4> f = fractions(at->exact);
          grid.values[i] = f[0];
          grid.causes[i] = {f[1], f[2], f[3]};
          continue;
        }
        const sim::BlockWritebackCounts c = project(t, scale);
        if (c.nonzero == 0) {
          continue;
        }
        // Between two anchors the shifts interpolated linearly in log2 s; beyond the last anchor on either side, that
        // anchor's shift.
        std::array<double, 4> shift{0, 0, 0, 0};
        if (lo != nullptr && hi != nullptr) {
          const double x = (std::log2(scale) - std::log2(lo->scale)) / (std::log2(hi->scale) - std::log2(lo->scale));
          const std::array<double, 4> a = shift_of(*lo), z = shift_of(*hi);
          for (std::size_t j = 0; j < 4; ++j) {
            shift[j] = (1 - x) * a[j] + x * z[j];
          }
        } else if (lo != nullptr || hi != nullptr) {
          shift = shift_of(lo != nullptr ? *lo : *hi);
        }
        const std::array<double, 4> f = fractions(c);
        grid.values[i] = share(f[0] + shift[0]);
        grid.causes[i] = {share(f[1] + shift[1]), share(f[2] + shift[2]), share(f[3] + shift[3])};
      }
    }
  }
}

// The grid of every format: the per-tensor ones from `scalar` (the grid of b.others), the block ones NaN for now.
FormatGrid merged_grid(const sim::Trace& reference, const sim::GroupTrace& g, std::span<const std::string> formats,
                       std::span<const double> lr_scales, const BlockFormats& b, const FormatGrid* scalar) {
  FormatGrid grid;
  grid.group = g.name;
  grid.formats.assign(formats.begin(), formats.end());
  grid.lr_scales.assign(lr_scales.begin(), lr_scales.end());
  grid.steps = reference.recorded_steps;
  const std::size_t T = grid.steps.size(), S = lr_scales.size();
  grid.values.assign(formats.size() * S * T, kNaN);
  grid.undefined.assign(formats.size(), std::string());
  grid.causes.assign(formats.size() * S * T, {kNaN, kNaN, kNaN});
  std::size_t other = 0;
  for (std::size_t f = 0; f < formats.size(); ++f) {
    if (std::find(b.at.begin(), b.at.end(), f) != b.at.end()) {
      continue;
    }
    grid.undefined[f] = scalar->undefined[other];
    std::copy_n(scalar->values.begin() + static_cast<std::ptrdiff_t>(other * S * T), S * T,
                grid.values.begin() + static_cast<std::ptrdiff_t>(f * S * T));
    ++other;
  }
  return grid;
}

FormatGrid scalar_format_grid(const sim::Trace& reference, std::string_view group, std::span<const std::string> formats,
                              std::span<const double> lr_scales) {
  const sim::GroupTrace& g = find_group(reference, group);
  require_joint_histogram(reference, g);
  GridPlan plan = plan_grid(reference, g, formats, lr_scales, g.has_margin());
  run_grid(plan, [&](std::size_t first, std::size_t count) {
    std::vector<sim::GroupTrace> rows;
    for (std::size_t t = first; t < first + count; ++t) {
      rows.push_back(rows_at(reference, g, t));
    }
    return rows;
  });
  return std::move(plan.grid);
}

FormatGrid scalar_format_grid(const sim::TraceReader& reader, std::string_view group,
                              std::span<const std::string> formats, std::span<const double> lr_scales) {
  const sim::Trace& header = reader.header();
  const sim::GroupTrace& g = find_group(header, group);
  const std::size_t index = static_cast<std::size_t>(&g - header.groups.data());
  // The header's group carries no rows: decide from the reader what it holds (one step read to see it).
  if (header.mode != "reference" || !(reader.group_has_margin(index) || reader.group_has_pairs(index))) {
    require_joint_histogram(header, g);  // throws the same message as for an in-memory trace
  }
  sim::GroupTrace shape = g;
  if (reader.recorded_steps() > 0) {
    shape = reader.read_group(index, 0, 1);
  }
  GridPlan plan = plan_grid(header, shape, formats, lr_scales, reader.group_has_margin(index));
  // Rows are read kGridReadSteps recorded steps at a time (one read per dataset: a row-at-a-time read decompresses
  // each chunk once per row, 7x slower on a 1000-step trace) and handed out a step at a time: the memory held is one
  // block of steps, whatever the number of recorded steps.
  constexpr std::size_t kGridReadSteps = 64;
  const std::size_t T = reader.recorded_steps();
  sim::GroupTrace block;
  std::size_t block_first = 0, block_count = 0;
  run_grid(plan, [&](std::size_t first, std::size_t count) {
    std::vector<sim::GroupTrace> rows;
    for (std::size_t t = first; t < first + count; ++t) {
      if (t < block_first || t >= block_first + block_count) {
        block_first = t;
        block_count = std::min(kGridReadSteps, T - t);
        block = reader.read_group(index, block_first, block_count);
      }
      rows.push_back(rows_at(header, block, t - block_first, block_first));
    }
    return rows;
  });
  return std::move(plan.grid);
}

}  // namespace

FormatGrid format_grid(const sim::Trace& reference, std::string_view group, std::span<const std::string> formats,
                       std::span<const double> lr_scales) {
  const BlockFormats b = split_formats(formats);
  if (b.at.empty()) {
    FormatGrid grid = scalar_format_grid(reference, group, formats, lr_scales);
    grid.causes.assign(grid.values.size(), {kNaN, kNaN, kNaN});
    return grid;
  }
  if (formats.empty() || lr_scales.empty()) {
    throw ForecastError("format_grid: empty format or learning-rate list");
  }
  const sim::GroupTrace& g = find_group(reference, group);
  for (std::size_t k = 0; k < b.at.size(); ++k) {
    require_block_sample(reference, g, b.names[k], b.specs[k], lr_scales);
  }
  std::optional<FormatGrid> scalar;
  if (!b.others.empty()) {
    scalar = scalar_format_grid(reference, group, b.others, lr_scales);
  }
  FormatGrid grid = merged_grid(reference, g, formats, lr_scales, b, scalar ? &*scalar : nullptr);
  block_grid_steps(b, g, 0, grid.steps.size(), grid);
  return grid;
}

FormatGrid format_grid(const sim::TraceReader& reader, std::string_view group, std::span<const std::string> formats,
                       std::span<const double> lr_scales) {
  const BlockFormats b = split_formats(formats);
  if (b.at.empty()) {
    FormatGrid grid = scalar_format_grid(reader, group, formats, lr_scales);
    grid.causes.assign(grid.values.size(), {kNaN, kNaN, kNaN});
    return grid;
  }
  if (formats.empty() || lr_scales.empty()) {
    throw ForecastError("format_grid: empty format or learning-rate list");
  }
  const sim::Trace& header = reader.header();
  const sim::GroupTrace& g = find_group(header, group);
  const std::size_t index = static_cast<std::size_t>(&g - header.groups.data());
  for (std::size_t k = 0; k < b.at.size(); ++k) {
    require_block_sample(header, g, b.names[k], b.specs[k], lr_scales);
  }
  std::optional<FormatGrid> scalar;
  if (!b.others.empty()) {
    scalar = scalar_format_grid(reader, group, b.others, lr_scales);
  }
  FormatGrid grid = merged_grid(header, g, formats, lr_scales, b, scalar ? &*scalar : nullptr);
  // A block of recorded steps at a time: the memory held does not grow with the number of recorded steps.
  constexpr std::size_t kBlockReadSteps = 16;
  const std::size_t T = reader.recorded_steps();
  for (std::size_t first = 0; first < T; first += kBlockReadSteps) {
    const std::size_t count = std::min(kBlockReadSteps, T - first);
    block_grid_steps(b, reader.read_group(index, first, count), first, count, grid);
  }
  return grid;
}

namespace {

Series defined_series(const FormatGrid& grid, const std::string& name) {
  if (!grid.undefined.front().empty()) {
    throw ForecastError("analytic grid: group \"" + grid.group + "\" format \"" + name +
                        "\": " + grid.undefined.front());
  }
  return Series{grid.steps, grid.values};
}

}  // namespace

Series analytic_series(const sim::TraceReader& reference, std::string_view group, std::string_view format,
                       double lr_scale) {
  const std::string name(format);
  return defined_series(
      format_grid(reference, group, std::span<const std::string>(&name, 1), std::span<const double>(&lr_scale, 1)),
      name);
}

Series analytic_series(const sim::Trace& reference, std::string_view group, std::string_view format, double lr_scale) {
  const std::string name(format);
  return defined_series(
      format_grid(reference, group, std::span<const std::string>(&name, 1), std::span<const double>(&lr_scale, 1)),
      name);
}

}  // namespace wbaudit::forecast
