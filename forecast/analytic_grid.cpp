#include "forecast/analytic_grid.hpp"

#include <cmath>
#include <limits>

#include "forecast/error.hpp"
#include "forecast/source.hpp"

namespace wbaudit::forecast {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void check_layout(const sim::RatioHistogramLayout& layout) {
  if (layout.bins < 3 || !(layout.bin_width > 0) || !std::isfinite(layout.d_min) || !std::isfinite(layout.bin_width)) {
    throw ForecastError("analytic grid: bad histogram layout (d_min " + std::to_string(layout.d_min) + ", width " +
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
    for (std::size_t b = 0; b < bins; ++b) total += g.ratio_histogram[t * bins + b];
    if (total != g.nonzero[t]) {
      throw ForecastError("analytic grid: group \"" + g.name + "\" step " + std::to_string(ref.recorded_steps[t]) +
                          ": histogram + zero-weight count " + std::to_string(total) + " != nonzero " +
                          std::to_string(g.nonzero[t]));
    }
  }
}
}  // namespace

double histogram_mass_above(std::span<const std::int64_t> row, const sim::RatioHistogramLayout& layout, double tau) {
  check_layout(layout);
  if (row.size() != static_cast<std::size_t>(layout.bins)) {
    throw ForecastError("histogram_mass_above: row has " + std::to_string(row.size()) + " bins, layout has " +
                        std::to_string(layout.bins));
  }
  const double lo_ok = layout.d_min + layout.bin_width;
  const double hi_ok = layout.d_min + (layout.bins - 1) * layout.bin_width;
  if (!(tau >= lo_ok && tau <= hi_ok)) {
    throw ForecastError("histogram_mass_above: threshold d > " + std::to_string(tau) +
                        " falls outside the histogram's unclamped range [" + std::to_string(lo_ok) + ", " +
                        std::to_string(hi_ok) + "]");
  }
  // Bin b = [d_min + b w, d_min + (b + 1) w). Bins wholly above tau count fully; the bin holding tau counts the
  // share (hi - tau) / w of its mass (uniform within the bin).
  const double x = (tau - layout.d_min) / layout.bin_width;  // tau in bin units
  const auto b_tau = static_cast<std::size_t>(std::floor(x));
  double mass = 0;
  for (std::size_t b = b_tau + 1; b < row.size(); ++b) mass += static_cast<double>(row[b]);
  const double partial = static_cast<double>(b_tau + 1) - x;  // in (0, 1]; 1 when tau is on the bin's lower edge
  if (b_tau < row.size()) mass += partial * static_cast<double>(row[b_tau]);
  return mass;
}

std::vector<double> analytic_erased_fraction(const sim::Trace& reference, const sim::GroupTrace& group, int man_bits,
                                             double lr_scale) {
  if (man_bits < 0) throw ForecastError("analytic_erased_fraction: mantissa width " + std::to_string(man_bits));
  if (!(lr_scale > 0) || !std::isfinite(lr_scale)) {
    throw ForecastError("analytic_erased_fraction: learning-rate scale " + std::to_string(lr_scale));
  }
  check_layout(reference.histogram);
  check_group(reference, group);
  const double tau = man_bits + 1.0 + std::log2(lr_scale);
  const auto bins = static_cast<std::size_t>(reference.histogram.bins);
  std::vector<double> out(reference.recorded_steps.size(), kNaN);
  for (std::size_t t = 0; t < out.size(); ++t) {
    if (group.nonzero[t] == 0) continue;
    const std::span<const std::int64_t> row(group.ratio_histogram.data() + t * bins, bins);
    try {
      out[t] = histogram_mass_above(row, reference.histogram, tau) / static_cast<double>(group.nonzero[t]);
    } catch (const ForecastError& e) {
      throw ForecastError(std::string(e.what()) + " (group \"" + group.name + "\", M = " + std::to_string(man_bits) +
                          ", lr scale " + std::to_string(lr_scale) + ")");
    }
  }
  return out;
}

AnalyticGrid analytic_grid(const sim::Trace& reference, const std::string& group, std::span<const int> man_bits,
                           std::span<const double> lr_scales) {
  if (man_bits.empty() || lr_scales.empty()) throw ForecastError("analytic_grid: empty M or learning-rate list");
  const sim::GroupTrace& g = find_group(reference, group);
  AnalyticGrid grid;
  grid.group = g.name;
  grid.man_bits.assign(man_bits.begin(), man_bits.end());
  grid.lr_scales.assign(lr_scales.begin(), lr_scales.end());
  grid.steps = reference.recorded_steps;
  grid.values.reserve(man_bits.size() * lr_scales.size() * grid.steps.size());
  for (int m : man_bits) {
    for (double s : lr_scales) {
      const auto series = analytic_erased_fraction(reference, g, m, s);
      grid.values.insert(grid.values.end(), series.begin(), series.end());
    }
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
      if (f.kind != sim::FormatKind::floating) continue;
      const auto it = g.projected.find(f.name);
      if (it == g.projected.end()) continue;
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
        if (std::isnan(exact) || std::isnan(analytic[t])) continue;
        const double diff = std::abs(analytic[t] - exact);
        ++check.compared_points;
        if (std::isnan(check.max_abs_difference) || diff > check.max_abs_difference) {
          check.max_abs_difference = diff;
          check.worst_format = f.name;
          check.worst_step = reference.recorded_steps[t];
        }
      }
    }
    if (any) out.push_back(std::move(check));
  }
  if (out.empty()) {
    throw ForecastError("check_analytic_grid: no group of the trace projects any of the given floating formats");
  }
  return out;
}

}  // namespace wbaudit::forecast
