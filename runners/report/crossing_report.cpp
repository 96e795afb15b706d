#include "runners/report/crossing_report.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <stdexcept>

#include "runners/report/figure.hpp"

namespace wbaudit::runners::report {
namespace {

std::string fmt_step(double t) {
  if (!std::isfinite(t)) return "—";
  std::ostringstream out;
  out << std::fixed << std::setprecision(t < 100 ? 1 : 0) << t;
  return out.str();
}

std::string fmt_percent(double x) {
  if (!std::isfinite(x)) return "—";
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << 100 * x << "%";
  return out.str();
}

std::string fraction(int a, int b) {
  return std::to_string(a) + "/" + std::to_string(b);
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  auto tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out) throw std::runtime_error(tmp.string() + ": cannot write report");
  }
  std::filesystem::rename(tmp, path);
}

Figure scatter_figure(const CrossingReport& report) {
  Figure fig;
  fig.title = "Predicted vs measured crossing step (theta = " + fmt_step(report.totals.threshold) + ")";
  fig.xlabel = "measured crossing step";
  fig.ylabel = "predicted crossing step (fp32 reference projection)";
  fig.logx = fig.logy = true;
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  std::map<std::string, Series> by_format;
  for (auto& row : report.rows) {
    if (!std::isfinite(row.measured) || !std::isfinite(row.predicted)) continue;
    lo = std::min({lo, row.measured, row.predicted});
    hi = std::max({hi, row.measured, row.predicted});
    static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"};
    static const int kPoints[] = {7, 5, 9, 11, 13, 15, 4};
    auto& s = by_format[row.format];
    if (s.title.empty()) {
      std::size_t k = (by_format.size() - 1) % 7;
      s.title = row.format;
      s.style = std::string("points pt ") + std::to_string(kPoints[k]) + " ps 1.0 lc rgb '" + kColors[k] + "'";
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
  double tol = report.totals.tolerance;
  auto band = [&](const std::string& title, double factor, const std::string& style) {
    Series s;
    s.title = title;
    s.style = style;
    for (int i = 0; i <= 50; ++i) {
      double x = lo * std::pow(hi / lo, i / 50.0);
      s.x.push_back(x);
      s.y.push_back(x * factor);
    }
    return s;
  };
  fig.series.push_back(band("y = x", 1.0, "lines lc rgb '#444444' dt 1"));
  fig.series.push_back(band("+" + fmt_percent(tol), 1 + tol, "lines lc rgb '#999999' dt 2"));
  fig.series.push_back(band("-" + fmt_percent(tol), 1 - tol, "lines lc rgb '#999999' dt 2"));
  for (auto& [name, s] : by_format) fig.series.push_back(s);
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

  std::vector<std::pair<std::string, std::string>> figures;  // (caption, stem)
  render(scatter_figure(report), dir / "figures", "crossing_scatter");
  figures.emplace_back("Predicted vs measured crossing steps (log-log). Dashed lines: the ±" +
                           fmt_percent(t.tolerance) + " tolerance band.",
                       "crossing_scatter");
  for (std::size_t p = 0; p < report.panels.size(); ++p) {
    const auto& panel = report.panels[p];
    Figure fig;
    fig.title = panel.title;
    fig.xlabel = "step";
    fig.ylabel = "erased fraction";
    fig.logx = true;
    fig.ymin = 0;
    fig.ymax = 1.02;
    std::vector<double> x = panel.steps;
    for (auto& v : x) v += 1;  // log axis: plot step + 1
    fig.xlabel = "step + 1";
    fig.series.push_back({"measured (target run)", x, panel.measured, "lines lw 2 lc rgb '#1f77b4'"});
    fig.series.push_back({"predicted (fp32 reference)", x, panel.predicted, "lines lw 2 dt 2 lc rgb '#d62728'"});
    fig.series.push_back(
        {"threshold", {x.front(), x.back()}, {t.threshold, t.threshold}, "lines lc rgb '#777777' dt 3"});
    std::string stem = "trajectory_" + std::to_string(p + 1);
    render(fig, dir / "figures", stem);
    figures.emplace_back("Erased fraction over time: " + panel.title, stem);
  }

  int crossing_cells = 0;
  for (auto& row : report.rows) crossing_cells += std::isfinite(row.measured) ? 1 : 0;

  std::vector<std::pair<std::string, std::string>> headline = {
      {"evaluation cells", std::to_string(t.cells)},
      {"both cross after initialization", fraction(t.both, t.cells)},
      {"within ±" + fmt_percent(t.tolerance) + " (of both-crossing)", fraction(t.within, t.both)},
      {"category differs (measured vs predicted)", fraction(t.differ, t.cells)},
      {"neither crosses", fraction(t.neither, t.cells)},
      {"measured above threshold at initialization", fraction(t.above_at_init, t.cells)},
      {"span of measured crossing steps (max/min)", std::isfinite(t.span) ? fmt_step(t.span) + "x" : "—"},
      {"threshold, burn-in", fmt_step(t.threshold) + ", " + std::to_string(t.burn_in)},
  };

  // Markdown
  std::ostringstream md;
  md << "# wbaudit report: " << report.sweep_name << "\n\n";
  if (!report.description.empty()) md << report.description << "\n\n";
  md << "| fact | value |\n|---|---|\n";
  for (auto& [k, v] : report.facts) md << "| " << k << " | " << v << " |\n";
  md << "\n## Crossings of the erased fraction\n\n| measure | value |\n|---|---|\n";
  for (auto& [k, v] : headline) md << "| " << k << " | " << v << " |\n";
  md << "\n";
  for (auto& [caption, stem] : figures)
    md << "![" << caption << "](figures/" << stem << ".png)\n\n*" << caption << "*\n\n";
  md << "## Per-cell crossings\n\n| cell | format | category | measured | predicted | rel. error | within |\n"
     << "|---|---|---|---:|---:|---:|:-:|\n";
  for (auto& row : report.rows) {
    md << "| " << row.cell << " | " << row.format << " | " << row.category << " | " << fmt_step(row.measured) << " | "
       << fmt_step(row.predicted) << " | " << fmt_percent(row.relative_error) << " | "
       << (std::isfinite(row.relative_error) ? (row.within_tolerance ? "yes" : "no") : "") << " |\n";
  }
  write_file(dir / "report.md", md.str());

  // HTML
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>wbaudit: " << html_escape(report.sweep_name)
       << "</title>\n<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
          "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}"
          "th{background:#f0f0f0}td.num{text-align:right;font-variant-numeric:tabular-nums}"
          "figure{margin:1.5em 0}figcaption{font-size:13px;color:#555}</style></head><body>\n";
  html << "<h1>wbaudit report: " << html_escape(report.sweep_name) << "</h1>\n";
  if (!report.description.empty()) html << "<p>" << html_escape(report.description) << "</p>\n";
  html << "<table>";
  for (auto& [k, v] : report.facts)
    html << "<tr><th>" << html_escape(k) << "</th><td>" << html_escape(v) << "</td></tr>";
  html << "</table>\n<h2>Crossings of the erased fraction</h2>\n<table>";
  for (auto& [k, v] : headline)
    html << "<tr><th>" << html_escape(k) << "</th><td class=num>" << html_escape(v) << "</td></tr>";
  html << "</table>\n";
  for (auto& [caption, stem] : figures) {
    html << "<figure><img src=\"figures/" << stem << ".svg\" alt=\"" << html_escape(caption) << "\"><figcaption>"
         << html_escape(caption) << "</figcaption></figure>\n";
  }
  html << "<h2>Per-cell crossings</h2>\n<table><tr><th>cell</th><th>format</th><th>category</th><th>measured</th>"
          "<th>predicted</th><th>rel. error</th><th>within</th></tr>\n";
  for (auto& row : report.rows) {
    html << "<tr><td>" << html_escape(row.cell) << "</td><td>" << row.format << "</td><td>" << row.category
         << "</td><td class=num>" << fmt_step(row.measured) << "</td><td class=num>" << fmt_step(row.predicted)
         << "</td><td class=num>" << fmt_percent(row.relative_error) << "</td><td>"
         << (std::isfinite(row.relative_error) ? (row.within_tolerance ? "yes" : "no") : "") << "</td></tr>\n";
  }
  html << "</table>\n<p style=\"font-size:12px;color:#777\">Crossing: first recorded step after burn-in where the "
          "erased "
          "fraction reaches the threshold, linearly interpolated between recorded steps (DESIGN.md §2). "
          "Generated by wbaudit.</p>\n</body></html>\n";
  write_file(dir / "report.html", html.str());
  return dir / "report.html";
}

}  // namespace wbaudit::runners::report
