#include "runners/report/crossing_report.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <stdexcept>

#include "runners/report/document.hpp"
#include "runners/report/figure.hpp"
#include "util/files.hpp"

namespace wbaudit::runners::report {
namespace {

std::string fmt_step(double t) {
  if (!std::isfinite(t)) {
    return "—";
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(t < 100 ? 1 : 0) << t;
  return out.str();
}

std::string fmt_percent(double x) {
  if (!std::isfinite(x)) {
    return "—";
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << 100 * x << "%";
  return out.str();
}

std::string fraction(int a, int b) {
  return std::to_string(a) + "/" + std::to_string(b);
}

Figure scatter_figure(const CrossingReport& report) {
  Figure fig;
  fig.title = "Predicted vs measured crossing step (theta = " + fmt_step(report.totals.threshold) + ")";
  fig.xlabel = "measured crossing step";
  fig.ylabel = "predicted crossing step (fp32 reference projection)";
  fig.logx = fig.logy = true;
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  std::map<std::string, Series> by_format;
  static const int kPoints[] = {7, 5, 9, 11, 13, 15, 4};
  for (auto& row : report.rows) {
    if (!std::isfinite(row.measured) || !std::isfinite(row.predicted) || row.below_min_group_size) {
      continue;
    }
    lo = std::min({lo, row.measured, row.predicted});
    hi = std::max({hi, row.measured, row.predicted});
    auto& s = by_format[row.format];
    if (s.title.empty()) {
      std::size_t k = (by_format.size() - 1) % 7;
      s.title = row.format;
      s.style =
          std::string("points pt ") + std::to_string(kPoints[k]) + " ps 1.0 lc rgb '" + format_colour(row.format) + "'";
    }
    s.x.push_back(row.measured);
    s.y.push_back(row.predicted);
  }
  if (!(lo > 0) || !(hi > 0)) {
    lo = 1;
    hi = 10;
  }
  lo /= 1.5;
  hi *= 1.5;
  const double tol = report.totals.tolerance;
  Series band{"±" + fmt_percent(tol) + " band", {}, {}, "filledcurves fs transparent solid 0.25 lc rgb '#999999'"};
  Series diagonal{"y = x", {}, {}, "lines lc rgb '#444444' dt 1"};
  for (int i = 0; i <= 50; ++i) {
    const double x = lo * std::pow(hi / lo, i / 50.0);
    band.x.push_back(x);
    band.y.push_back(x);
    band.low.push_back(x * (1 - tol));
    band.high.push_back(x * (1 + tol));
    diagonal.x.push_back(x);
    diagonal.y.push_back(x);
  }
  band.columns = "1:3:4";
  fig.series.push_back(band);
  fig.series.push_back(diagonal);
  for (auto& [name, s] : by_format) {
    fig.series.push_back(s);
  }
  std::ostringstream range;
  range << std::setprecision(17) << "set xrange [" << lo << ":" << hi << "]; set yrange [" << lo << ":" << hi << "]";
  fig.extra.push_back(range.str());
  fig.extra.push_back("set size square");
  return fig;
}

}  // namespace

std::filesystem::path write_crossing_report(const CrossingReport& report, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir / "figures");
  const auto& t = report.totals;

  Document doc("wbaudit report: " + report.sweep_name);
  if (!report.description.empty()) {
    doc.paragraph(report.description);
  }
  {
    std::vector<std::vector<std::string>> rows;
    for (auto& [k, v] : report.facts) {
      rows.push_back({k, v});
    }
    doc.heading("Run");
    doc.table({"fact", "value"}, rows);
  }
  if (!report.links.empty()) {
    doc.links("Tables and other reports:", report.links);
  }

  doc.heading("Crossings of the erased fraction");
  doc.paragraph(
      "A crossing is the first recorded step after the burn-in t0 where the erased fraction reaches the "
      "threshold, linearly interpolated between recorded steps; a trajectory at or above the threshold at "
      "t0 is \"above at initialization\", never a crossing. Burn-in t0 = " +
      std::to_string(t.burn_in) + " (" + t.burn_in_how + "); threshold " + fmt_step(t.threshold) + "; tolerance ±" +
      fmt_percent(t.tolerance) + ".");
  std::vector<std::vector<std::string>> headline = {
      {"evaluation cells counted", std::to_string(t.cells)},
      {"both cross after the burn-in", fraction(t.both, t.cells)},
      {"within ±" + fmt_percent(t.tolerance) + " (of both-crossing)", fraction(t.within, t.both)},
      {"category differs (measured vs predicted)", fraction(t.differ, t.cells)},
      {"neither crosses", fraction(t.neither, t.cells)},
      {"measured above threshold at the burn-in", fraction(t.above_at_init, t.cells)},
      {"span of measured crossing steps (max/min)", std::isfinite(t.span) ? fmt_step(t.span) + "x" : "—"},
      {"measured re-crossings (falls back below the threshold after crossing)",
       fraction(t.measured_recrossing, t.cells)},
      {"predicted re-crossings", fraction(t.predicted_recrossing, t.cells)},
      {"cells left out: group below " + std::to_string(t.min_group_size) + " coordinates",
       std::to_string(t.below_min_group_size) + " of " + std::to_string(t.cells + t.below_min_group_size)},
  };
  doc.table({"measure", "value"}, headline);

  doc.subheading("By measured crossing-time decade");
  {
    std::vector<std::vector<std::string>> rows;
    for (auto& d : t.decades) {
      rows.push_back({"[" + fmt_step(d.lo) + ", " + fmt_step(d.hi) + ")", std::to_string(d.measured),
                      std::to_string(d.both), fraction(d.within, d.both), fmt_percent(d.median_relative_error)});
    }
    if (rows.empty()) {
      rows.push_back({"(no measured crossing)", "", "", "", ""});
    }
    doc.table({"measured crossing step", "measured crossings", "both cross", "within ±" + fmt_percent(t.tolerance),
               "median rel. error"},
              rows);
  }

  doc.heading("Figures");
  render(scatter_figure(report), dir / "figures", "crossing_scatter");
  doc.figure("crossing_scatter",
             "Predicted vs measured crossing steps (log-log), one colour per format. Shaded: "
             "the ±" +
                 fmt_percent(t.tolerance) + " tolerance band around y = x.");
  if (!report.panel_rule.empty()) {
    doc.paragraph("Trajectory panels: " + report.panel_rule);
  }
  for (std::size_t p = 0; p < report.panels.size(); ++p) {
    const auto& panel = report.panels[p];
    Figure fig;
    fig.title = panel.title;
    fig.logx = true;
    fig.ymin = 0;
    fig.ymax = 1.02;
    std::vector<double> x = panel.steps;
    for (auto& v : x) {
      v += 1;  // log axis: plot step + 1
    }
    fig.xlabel = "step + 1";
    fig.ylabel = "erased fraction";
    fig.series.push_back({"measured (target run)", x, panel.measured, "lines lw 2 lc rgb '#1f77b4'"});
    fig.series.push_back({"predicted (fp32 reference)", x, panel.predicted, "lines lw 2 dt 2 lc rgb '#d62728'"});
    fig.series.push_back(
        {"threshold", {x.front(), x.back()}, {t.threshold, t.threshold}, "lines lc rgb '#777777' dt 3"});
    fig.series.push_back(
        {"burn-in", {double(t.burn_in) + 1, double(t.burn_in) + 1}, {0, 1.02}, "lines lc rgb '#aaaaaa' dt 4"});
    std::string stem = "trajectory_" + std::to_string(p + 1);
    render(fig, dir / "figures", stem);
    doc.figure(stem, "Erased fraction over time (" + panel.why + "): " + panel.title);
  }

  doc.heading("Per-cell crossings");
  {
    std::vector<std::vector<std::string>> rows;
    for (auto& row : report.rows) {
      rows.push_back({row.cell, row.format, row.group_size >= 0 ? std::to_string(row.group_size) : "",
                      row.below_min_group_size ? row.category + " (left out: small group)" : row.category,
                      fmt_step(row.measured), fmt_step(row.predicted), fmt_percent(row.relative_error),
                      std::isfinite(row.relative_error) ? (row.within_tolerance ? "yes" : "no") : "",
                      row.measured_recrossings ? std::to_string(row.measured_recrossings) : ""});
    }
    doc.table({"cell", "format", "coordinates", "category", "measured", "predicted", "rel. error", "within",
               "measured re-crossings"},
              rows);
  }
  util::write_atomic(dir / "report.md", doc.markdown(), /*durable=*/false);
  util::write_atomic(dir / "report.html", doc.html(), /*durable=*/false);
  return dir / "report.html";
}

}  // namespace wbaudit::runners::report
