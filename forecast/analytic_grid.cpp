#include "forecast/analytic_grid.hpp"
#include "stats/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "forecast/error.hpp"
#include "forecast/source.hpp"
#include "sim/precision/storage_format.hpp"

namespace wbaudit::forecast {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void check_layout(const sim::RatioHistogramLayout& layout) {
  if (layout.bins < 3 || !(layout.bin_width > 0) || !std::isfinite(layout.d_min) || !std::isfinite(layout.bin_width)) {
    throw ForecastError("analytic grid: bad histogram layout (d_min " + stats::value_text(layout.d_min) + ", width " +
                        std::to_string(layout.bin_width) + ", bins " + std::to_string(layout.bins) + ")");
  }
}

// Validates the reference-mode arrays of one group against the recorded steps.
void check_group(const sim::Trace& ref, const sim::GroupTrace& g) {
  const std::size_t steps = ref.recorded_steps.size();
  const auto bins = static_cast<std::size_t>(ref.histogram.bins);
  if (g.nonzero.size() != steps) {
    throw ForecastError("analytic grid: group \"" + g.name + "\" has " + std::to_string(g.nonzero.size()) +
                        " nonzero counts but " + std::to_string(steps) + " recorded steps");
  }
  if (g.ratio_histogram.size() != steps * bins) {
    throw ForecastError("analytic grid: group \"" + g.name + "\" histogram has " +
                        std::to_string(g.ratio_histogram.size()) + " entries, expected " + std::to_string(steps) +
                        " steps x " + std::to_string(bins) + " bins");
  }
  if (g.zero_weight.size() != steps) {
    throw ForecastError("analytic grid: group \"" + g.name + "\" has " + std::to_string(g.zero_weight.size()) +
                        " zero-weight counts but " + std::to_string(steps) + " recorded steps");
  }
  for (std::size_t t = 0; t < steps; ++t) {
    std::int64_t total = g.zero_weight[t];
    for (std::size_t b = 0; b < bins; ++b) {
      total += g.ratio_histogram[t * bins + b];
    }
    if (total != g.nonzero[t]) {
      throw ForecastError("analytic grid: group \"" + g.name + "\" step " + std::to_string(ref.recorded_steps[t]) +
                          ": histogram + zero-weight count " + std::to_string(total) + " != nonzero " +
                          std::to_string(g.nonzero[t]));
    }
  }
}
// Bin b = [d_min + b w, d_min + (b + 1) w). Bins wholly above tau count fully; the bin holding tau counts the share
// (hi - tau) / w of its mass (uniform within the bin). Returns that bin and the share, in (0, 1] (1 when tau is on
// the bin's lower edge). tau inside a clamped (first/last) bin or beyond is refused.
std::pair<std::size_t, double> threshold_bin(const sim::RatioHistogramLayout& layout, double tau) {
  const double lo_ok = layout.d_min + layout.bin_width;
  const double hi_ok = layout.d_min + (layout.bins - 1) * layout.bin_width;
  if (!(tau >= lo_ok && tau <= hi_ok)) {
    throw ForecastError("analytic grid: threshold d > " + stats::value_text(tau) +
                        " falls outside the histogram's unclamped range [" + stats::value_text(lo_ok) + ", " +
                        stats::value_text(hi_ok) + "]");
  }
  const double x = (tau - layout.d_min) / layout.bin_width;  // tau in bin units
  const auto b_tau = static_cast<std::size_t>(std::floor(x));
  return {b_tau, static_cast<double>(b_tau + 1) - x};
}

double threshold_of(int man_bits, double lr_scale) {
  if (man_bits < 0) {
    throw ForecastError("analytic grid: mantissa width " + std::to_string(man_bits));
  }
  if (!(lr_scale > 0) || !std::isfinite(lr_scale)) {
    throw ForecastError("analytic grid: learning-rate scale " + stats::value_text(lr_scale));
  }
  return man_bits + 1.0 + std::log2(lr_scale);
}

// Each threshold's bin and share, the error naming the group and `context`.
std::vector<std::pair<std::size_t, double>> bins_of(const sim::RatioHistogramLayout& layout,
                                                    const std::vector<double>& taus, const std::string& group,
                                                    const std::string& context) {
  std::vector<std::pair<std::size_t, double>> out;
  for (double tau : taus) {
    try {
      out.push_back(threshold_bin(layout, tau));
    } catch (const ForecastError& e) {
      throw ForecastError(std::string(e.what()) + " (group \"" + group + "\", " + context + ")");
    }
  }
  return out;
}

// Step t's fraction for each threshold (out[k][t]) from its histogram row and nonzero count: one suffix sum, then O(1)
// per threshold. Integer suffix sums keep the result identical to histogram_mass_above.
void step_fractions(const std::int64_t* row, std::size_t bins, std::int64_t nonzero,
                    const std::vector<std::pair<std::size_t, double>>& bins_of_tau, std::vector<std::int64_t>& suffix,
                    std::size_t t, std::vector<std::vector<double>>& out) {
  if (nonzero == 0) {
    return;
  }
  suffix.resize(bins + 1);
  suffix[bins] = 0;
  for (std::size_t b = bins; b-- > 0;) {
    suffix[b] = suffix[b + 1] + row[b];
  }
  const auto n = static_cast<double>(nonzero);
  for (std::size_t k = 0; k < bins_of_tau.size(); ++k) {
    const auto [b_tau, partial] = bins_of_tau[k];
    out[k][t] = (static_cast<double>(suffix[b_tau + 1]) + partial * static_cast<double>(row[b_tau])) / n;
  }
}

// Fractions for several thresholds at once on a validated group. Returns [tau][T].
std::vector<std::vector<double>> fractions(const sim::Trace& ref, const sim::GroupTrace& g,
                                           const std::vector<double>& taus, const std::string& context) {
  check_layout(ref.histogram);
  check_group(ref, g);
  const auto bins_of_tau = bins_of(ref.histogram, taus, g.name, context);
  const auto bins = static_cast<std::size_t>(ref.histogram.bins);
  const std::size_t steps = ref.recorded_steps.size();
  std::vector<std::vector<double>> out(taus.size(), std::vector<double>(steps, kNaN));
  std::vector<std::int64_t> suffix;
  for (std::size_t t = 0; t < steps; ++t) {
    step_fractions(g.ratio_histogram.data() + t * bins, bins, g.nonzero[t], bins_of_tau, suffix, t, out);
  }
  return out;
}
}  // namespace

double histogram_mass_above(std::span<const std::int64_t> row, const sim::RatioHistogramLayout& layout, double tau) {
  check_layout(layout);
  if (row.size() != static_cast<std::size_t>(layout.bins)) {
    throw ForecastError("histogram_mass_above: row has " + std::to_string(row.size()) + " bins, layout has " +
                        std::to_string(layout.bins));
  }
  const auto [b_tau, partial] = threshold_bin(layout, tau);
  std::int64_t above = 0;
  for (std::size_t b = b_tau + 1; b < row.size(); ++b) {
    above += row[b];
  }
  return static_cast<double>(above) + partial * static_cast<double>(row[b_tau]);
}

std::vector<double> analytic_erased_fraction(const sim::Trace& reference, const sim::GroupTrace& group, int man_bits,
                                             double lr_scale) {
  const double tau = threshold_of(man_bits, lr_scale);
  return fractions(reference, group, {tau},
                   "M = " + std::to_string(man_bits) + ", lr scale " + stats::value_text(lr_scale))
      .front();
}

std::vector<double> analytic_erased_fraction(const sim::TraceReader& reference, std::string_view group, int man_bits,
                                             double lr_scale, std::size_t block_steps) {
  const sim::Trace& header = reference.header();
  const sim::GroupTrace& g = find_group(header, group);
  const auto index = static_cast<std::size_t>(&g - header.groups.data());
  const double tau = threshold_of(man_bits, lr_scale);
  check_layout(header.histogram);
  const auto bins_of_tau = bins_of(header.histogram, {tau}, g.name,
                                   "M = " + std::to_string(man_bits) + ", lr scale " + stats::value_text(lr_scale));
  const auto bins = static_cast<std::size_t>(header.histogram.bins);
  const std::size_t steps = reference.recorded_steps();
  std::vector<std::vector<double>> out(1, std::vector<double>(steps, kNaN));
  std::vector<std::int64_t> nonzero, zero_weight, rows, suffix;
  block_steps = std::max<std::size_t>(1, block_steps);
  for (std::size_t first = 0; first < steps; first += block_steps) {
    const std::size_t count = std::min(block_steps, steps - first);
    nonzero.resize(count);
    zero_weight.resize(count);
    rows.resize(count * bins);
    try {
      reference.read_group_values(index, "nonzero", 1, first, count, nonzero.data());
      reference.read_group_values(index, "zero_weight", 1, first, count, zero_weight.data());
      reference.read_group_values(index, "ratio_histogram", bins, first * bins, count * bins, rows.data());
    } catch (const sim::TraceFileError& e) {
      throw ForecastError(std::string("analytic grid: group \"") + g.name + "\": " + e.what());
    }
    for (std::size_t i = 0; i < count; ++i) {  // check_group's rule, a step at a time
      std::int64_t total = zero_weight[i];
      for (std::size_t b = 0; b < bins; ++b) {
        total += rows[i * bins + b];
      }
      if (total != nonzero[i]) {
        throw ForecastError("analytic grid: group \"" + g.name + "\" step " +
                            std::to_string(header.recorded_steps[first + i]) + ": histogram + zero-weight count " +
                            std::to_string(total) + " != nonzero " + std::to_string(nonzero[i]));
      }
      step_fractions(rows.data() + i * bins, bins, nonzero[i], bins_of_tau, suffix, first + i, out);
    }
  }
  return std::move(out.front());
}

AnalyticGrid analytic_grid(const sim::Trace& reference, const std::string& group, std::span<const int> man_bits,
                           std::span<const double> lr_scales) {
  if (man_bits.empty() || lr_scales.empty()) {
    throw ForecastError("analytic_grid: empty M or learning-rate list");
  }
  const sim::GroupTrace& g = find_group(reference, group);
  AnalyticGrid grid;
  grid.group = g.name;
  grid.man_bits.assign(man_bits.begin(), man_bits.end());
  grid.lr_scales.assign(lr_scales.begin(), lr_scales.end());
  grid.steps = reference.recorded_steps;
  std::vector<double> taus;
  for (int m : man_bits) {
    for (double s : lr_scales) {
      taus.push_back(threshold_of(m, s));
    }
  }
  const auto series = fractions(reference, g, taus, "analytic_grid");
  grid.values.reserve(taus.size() * grid.steps.size());
  for (const auto& v : series) {
    grid.values.insert(grid.values.end(), v.begin(), v.end());
  }
  return grid;
}

std::vector<AnalyticCheck> check_analytic_grid(const sim::Trace& reference, std::span<const sim::FormatSpec> formats) {
  std::vector<AnalyticCheck> out;
  for (const auto& g : reference.groups) {
    AnalyticCheck check;
    check.group = g.name;
    check.max_abs_difference = kNaN;
    bool any = false;
    for (const auto& f : formats) {
      if (f.kind != sim::FormatKind::floating) {
        continue;
      }
      const auto it = g.projected.find(f.name);
      if (it == g.projected.end()) {
        continue;
      }
      if (it->second.fraction.size() != reference.recorded_steps.size()) {
        throw ForecastError("check_analytic_grid: group \"" + g.name + "\" format \"" + f.name +
                            "\": " + std::to_string(it->second.fraction.size()) + " fractions but " +
                            std::to_string(reference.recorded_steps.size()) + " recorded steps");
      }
      any = true;
      check.formats.emplace_back(f.name);
      const auto analytic = analytic_erased_fraction(reference, g, f.man_bits, 1.0);
      for (std::size_t t = 0; t < analytic.size(); ++t) {
        const double exact = it->second.fraction[t];
        if (std::isnan(exact) || std::isnan(analytic[t])) {
          continue;
        }
        const double diff = std::abs(analytic[t] - exact);
        ++check.compared_points;
        if (std::isnan(check.max_abs_difference) || diff > check.max_abs_difference) {
          check.max_abs_difference = diff;
          check.worst_format = f.name;
          check.worst_step = reference.recorded_steps[t];
        }
      }
    }
    if (any) {
      out.push_back(std::move(check));
    }
  }
  if (out.empty()) {
    throw ForecastError("check_analytic_grid: no group of the trace projects any of the given floating formats");
  }
  return out;
}

std::vector<AnalyticCheck> check_analytic_grid(const sim::Trace& reference) {
  std::set<std::string> names;
  for (const auto& g : reference.groups) {
    for (const auto& [name, series] : g.projected) {
      names.insert(name);
    }
  }
  std::vector<sim::FormatSpec> formats;
  for (const auto& name : names) {
    if (sim::is_block_storage_name(name)) {
      continue;  // the analytic grid does not cover block-scaled formats (their scale varies per block)
    }
    try {
      formats.push_back(sim::format_from_name(name));
    } catch (const sim::FormatError& e) {
      throw ForecastError("check_analytic_grid: projected format \"" + name + "\": " + e.what());
    }
  }
  return check_analytic_grid(reference, formats);
}

}  // namespace wbaudit::forecast
