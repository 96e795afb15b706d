// The figures of the skill report: the common-time decomposition, the most and least predictable cells, the
// per-cell mean anomalies, rmse by step and by format, and the cohort. Predictors whose tables are identical share one
// legend entry ("source = matched-reference"); the primary predictor (the first scored forecast) is drawn last, on
// top, so that no series hides it. Each predictor keeps its registry colour (forecast/predictor_registry.hpp).
#include <algorithm>
#include <cmath>
#include <optional>

#include "forecast/predictor_registry.hpp"
#include "runners/evaluate/report_rows.hpp"
#include "runners/evaluate/report_writers.hpp"
#include "runners/report/figure.hpp"
#include "stats/table_predicates.hpp"
#include "util/text.hpp"

namespace wbaudit::runners::evaluation {
namespace fs = std::filesystem;

namespace {

std::string num(double x, int precision = 6) {
  return util::number_text(x, precision);
}

std::string colour(const std::string& predictor) {
  return forecast::predictor_colour(predictor);
}

// One legend entry: a predictor's table, and the names of the predictors with the same table.
struct Drawn {
  std::string title;
  const forecast::PredictorTable* table;
  std::string name;  // the first predictor of the group
  bool primary;
};

std::vector<Drawn> drawn_tables(const EvaluationResult& r, const PredictorEvaluation* primary) {
  std::vector<Drawn> drawn;
  for (const auto& t : r.tables) {
    bool merged = false;
    for (auto& d : drawn) {
      if (stats::same_values(d.table->table.values, t.table.values)) {
        d.title += " = " + t.name + (t.privileged ? " (privileged)" : "");
        d.primary = d.primary || (primary && t.name == primary->name);
        merged = true;
        break;
      }
    }
    if (!merged) {
      drawn.push_back({t.name + (t.privileged     ? " (privileged)"
                                 : t.post_outcome ? " (post-outcome)"
                                                  : ""),
                       &t, t.name, primary && t.name == primary->name});
    }
  }
  std::stable_partition(drawn.begin(), drawn.end(), [](const Drawn& d) { return !d.primary; });
  return drawn;
}

const PredictorEvaluation* evaluation_of(const EvaluationResult& r, const std::string& name) {
  const PredictorEvaluation* p = nullptr;
  for (const auto& q : r.predictors) {
    if (q.name == name) {
      p = &q;
    }
  }
  return p;
}

// One bar group of the decomposition figure: a table's shares and where their intervals are.
struct Bar {
  std::string label;
  const stats::Decomposition* d;
  const std::map<std::string, stats::Interval>* ci;
  std::string prefix;
};

std::vector<Bar> decomposition_bars(const EvaluationResult& r) {
  std::vector<Bar> bars;
  if (r.outcome_decomposition) {
    bars.push_back({"outcome", &*r.outcome_decomposition, &r.outcome_intervals, ""});
  }
  for (const auto& p : r.predictors) {
    if (p.error_decomposition) {
      bars.push_back({p.name + " error", &*p.error_decomposition, &p.intervals, "error_"});
    }
  }
  return bars;
}

// Decomposition shares with their bootstrap intervals as error bars.
std::optional<ReportFigure> decomposition_figure(const EvaluationResult& r, const fs::path& dir) {
  const auto& boot = r.analysis.bootstrap;
  report::Figure fig;
  fig.title = std::string("Common-time decomposition y = mu + a_t + b_c + e: shares of SS_total");
  fig.ylabel = std::string("share of SS_total");
  fig.ymin = 0;
  fig.ymax = 1.05;
  const std::vector<Bar> bars = decomposition_bars(r);
  const char* names[3] = {"share_time", "share_cell", "share_residual"};
  const char* colours[3] = {"#4c72b0", "#dd8452", "#55a868"};
  for (int s = 0; s < 3; ++s) {
    report::Series boxes{std::string(names[s]), {}, {}, std::string("boxes lc rgb '") + colours[s] + "'"};
    report::Series errors{std::string(names[s]) + " " + num(100 * boot.confidence) + "% interval",
                          {},
                          {},
                          "yerrorbars pt 0 lw 1.5 lc rgb '#222222'"};
    for (std::size_t b = 0; b < bars.size(); ++b) {
      const double x = double(b) + (s - 1) * 0.27;
      const auto* d = bars[b].d;
      const double y = s == 0 ? d->share_time : s == 1 ? d->share_cell : d->share_residual;
      boxes.x.push_back(x);
      boxes.y.push_back(y);
      auto it = bars[b].ci->find(bars[b].prefix + names[s]);
      if (it != bars[b].ci->end()) {
        errors.x.push_back(x);
        errors.y.push_back(y);
        errors.low.push_back(it->second.lower);
        errors.high.push_back(it->second.upper);
      }
    }
    fig.series.push_back(boxes);
    if (!errors.x.empty()) {
      if (s > 0) {
        errors.title = "";  // one legend entry for the error bars
      }
      fig.series.push_back(errors);
    }
  }
  std::string tics = "set xtics rotate by -25 (";
  for (std::size_t b = 0; b < bars.size(); ++b) {
    tics += (b ? ", " : "") + std::string("'") + bars[b].label + "' " + std::to_string(b);
  }
  tics += ")";
  fig.extra = {"set style fill solid 0.8 border -1", "set boxwidth 0.25", tics,
               "set xrange [-0.6:" + std::to_string(double(bars.size()) - 0.4) + "]"};
  if (bars.empty()) {
    return std::nullopt;
  }
  report::render(fig, dir, "decomposition");
  return ReportFigure{"decomposition",
                      "Shares SS_time, SS_cell, SS_residual of SS_total, for the outcome and for "
                      "each predictor's forecast error (descriptive), with their " +
                          num(100 * boot.confidence) + "% " + std::string(stats::to_string(boot.method)) +
                          " bootstrap intervals as error bars (absent where undefined)."};
}

// Outcome and every predictor over time for one cell (`which`: "most" or "least" predictable by the primary).
ReportFigure predictable_cell_figure(const EvaluationResult& r, const std::vector<Drawn>& drawn,
                                     const PredictorEvaluation& primary, const std::string& which,
                                     const stats::CellMetrics& m, const fs::path& dir) {
  const auto i = std::find(r.cells.begin(), r.cells.end(), m.cell) - r.cells.begin();
  report::Figure fig;
  fig.title = std::string(which + " predictable cell (rmse_cell of " + primary.name + " = " +
                          util::shown_number(m.rmse_cell) + "): " + m.cell);
  fig.xlabel = "step";
  fig.ylabel = "erased fraction";
  fig.width = 1000;
  std::vector<double> x(r.steps.begin(), r.steps.end());
  report::Series out{"outcome (measured)", x, {}, "lines lw 3 lc rgb '#000000'"};
  for (Eigen::Index k = 0; k < r.outcome.cols(); ++k) {
    out.y.push_back(r.outcome.values(i, k));
  }
  fig.series.push_back(out);
  int dash = 2;
  int point = 4;
  for (const auto& d : drawn) {
    report::Series s{d.title, x, {}, {}};
    s.style = d.primary ? "linespoints lw 2 pt 7 ps 0.6 lc rgb '" + colour(d.name) + "'"
                        : "linespoints lw 1.5 dt " + std::to_string(dash++) + " pt " + std::to_string(point++) +
                              " ps 0.8 pi 4 lc rgb '" + colour(d.name) + "'";
    for (Eigen::Index k = 0; k < d.table->table.cols(); ++k) {
      s.y.push_back(d.table->table.values(i, k));
    }
    fig.series.push_back(s);
  }
  fig.extra = {"set key bottom right"};
  report::render(fig, dir, which + "_predictable");
  return {which + "_predictable", "Outcome and every predictor over time, " + which +
                                      " predictable cell by rmse_cell of " + primary.name +
                                      " (drawn on top, solid); predictors with identical series share one "
                                      "legend entry (\"a = b\")."};
}

// Outcome and every predictor over time, most and least predictable cell by rmse_cell of the primary.
std::vector<ReportFigure> predictable_cell_figures(const EvaluationResult& r, const std::vector<Drawn>& drawn,
                                                   const PredictorEvaluation* primary, const fs::path& dir) {
  if (!primary || primary->metrics.cells.empty()) {
    return {};
  }
  auto cmp = [](const stats::CellMetrics& a, const stats::CellMetrics& b) { return a.rmse_cell < b.rmse_cell; };
  const auto& cells = primary->metrics.cells;
  const auto best = std::min_element(cells.begin(), cells.end(), cmp);
  const auto worst = std::max_element(cells.begin(), cells.end(), cmp);
  return {predictable_cell_figure(r, drawn, *primary, "most", *best, dir),
          predictable_cell_figure(r, drawn, *primary, "least", *worst, dir)};
}

// Per-cell mean anomalies, predicted vs measured.
std::optional<ReportFigure> anomaly_figure(const EvaluationResult& r, const std::vector<Drawn>& drawn,
                                           const fs::path& dir) {
  report::Figure fig;
  fig.title = "Directional specificity: per-cell mean anomalies (common time removed)";
  fig.xlabel = std::string("measured mean anomaly m_Y(c)");
  fig.ylabel = std::string("predicted mean anomaly m_P(c)");
  double lo = 0;
  double hi = 0;
  int point = 5;
  for (const auto& d : drawn) {
    const PredictorEvaluation* p = evaluation_of(r, d.name);
    if (!p || !p->unavailable.empty() || p->directional.cells.empty()) {
      continue;
    }
    report::Series s;
    s.title = d.title + (p->directional_note.empty() ? "" : " (anomaly field exactly zero)");
    s.style = d.primary ? "points pt 7 ps 0.9 lc rgb '" + colour(d.name) + "'"
                        : "points pt " + std::to_string(point++) + " ps 1.1 lc rgb '" + colour(d.name) + "'";
    for (Eigen::Index c = 0; c < p->directional.outcome_cell_anomaly.size(); ++c) {
      s.x.push_back(p->directional.outcome_cell_anomaly[c]);
      s.y.push_back(p->directional.predictor_cell_anomaly[c]);
      lo = std::min({lo, s.x.back(), s.y.back()});
      hi = std::max({hi, s.x.back(), s.y.back()});
    }
    fig.series.push_back(s);
  }
  if (fig.series.empty()) {
    return std::nullopt;
  }
  fig.series.insert(fig.series.begin(), {"y = x", {lo, hi}, {lo, hi}, "lines dt 2 lc rgb '#888888'"});
  fig.extra = {"set xzeroaxis", "set yzeroaxis"};
  report::render(fig, dir, "anomaly_scatter");
  return ReportFigure{"anomaly_scatter",
                      "Per-cell mean anomalies, predicted vs measured: points in the first "
                      "and third quadrants have the right sign. The scored predictor is drawn "
                      "last (filled circles); identical predictors share one legend entry."};
}

// RMSE by recorded step, one curve per predictor with its interval band.
std::optional<ReportFigure> skill_by_step_figure(const EvaluationResult& r, const std::vector<Drawn>& drawn,
                                                 const fs::path& dir) {
  report::Figure fig;
  fig.title = "RMSE over cells at each recorded step, with " + num(100 * r.analysis.bootstrap.confidence) +
              "% percentile intervals";
  fig.xlabel = "step + 1";
  fig.ylabel = "RMSE of the erased fraction";
  fig.logx = true;
  fig.ymin = 0;
  for (const auto& d : drawn) {
    const PredictorEvaluation* p = evaluation_of(r, d.name);
    if (!p || p->by_step.empty()) {
      continue;
    }
    report::Series band{"", {}, {}, "filledcurves fs transparent solid 0.2 noborder lc rgb '" + colour(d.name) + "'"};
    report::Series line{d.title, {}, {}, "lines lw 2 lc rgb '" + colour(d.name) + "'"};
    for (const auto& s : p->by_step) {
      line.x.push_back(double(s.step) + 1);
      line.y.push_back(s.rmse);
      if (std::isfinite(s.lower)) {
        band.x.push_back(double(s.step) + 1);
        band.y.push_back(s.rmse);
        band.low.push_back(s.lower);
        band.high.push_back(s.upper);
      }
    }
    band.columns = "1:3:4";
    if (std::none_of(line.y.begin(), line.y.end(), [](double y) { return std::isfinite(y); })) {
      continue;  // no step with a defined RMSE (every cell of the predictor dropped or undefined): nothing to draw
    }
    if (!band.x.empty()) {
      fig.series.push_back(band);
    }
    fig.series.push_back(line);
  }
  if (fig.series.empty()) {
    return std::nullopt;
  }
  report::render(fig, dir, "skill_by_step");
  return ReportFigure{"skill_by_step",
                      "RMSE over cells at each recorded step, one curve per predictor, shaded: "
                      "its percentile bootstrap interval over the resampling units "
                      "(skill_by_step.csv)."};
}

// rmse_macro by format, one line per predictor.
std::optional<ReportFigure> skill_by_format_figure(const EvaluationResult& r, const std::vector<Drawn>& drawn,
                                                   const fs::path& dir) {
  std::vector<std::string> levels;
  for (const auto& b : r.breakdown) {
    if (b.factor == "format" && std::find(levels.begin(), levels.end(), b.level) == levels.end()) {
      levels.push_back(b.level);
    }
  }
  if (levels.empty()) {
    return std::nullopt;
  }
  report::Figure fig;
  fig.title = "rmse_macro by target format";
  fig.ylabel = "rmse_macro";
  fig.ymin = 0;
  int point = 5;
  for (const auto& d : drawn) {
    report::Series s{
        d.title,
        {},
        {},
        // Formats are categories: points, no line joining them.
        "points pt " + std::to_string(d.primary ? 7 : point++) + " ps 1.6 lc rgb '" + colour(d.name) + "'"};
    for (const auto& b : r.breakdown) {
      if (b.factor != "format" || b.predictor != d.name) {
        continue;
      }
      s.x.push_back(double(std::find(levels.begin(), levels.end(), b.level) - levels.begin()));
      s.y.push_back(b.rmse_macro);
    }
    if (!s.x.empty()) {
      fig.series.push_back(s);
    }
  }
  std::string tics = "set xtics (";
  for (std::size_t k = 0; k < levels.size(); ++k) {
    tics += (k ? ", " : "") + std::string("'") + levels[k] + "' " + std::to_string(k);
  }
  fig.extra = {tics + ")", "set xrange [-0.5:" + std::to_string(double(levels.size()) - 0.5) + "]"};
  report::render(fig, dir, "skill_by_format");
  return ReportFigure{"skill_by_format",
                      "rmse_macro of each predictor per target format (breakdown.csv has every "
                      "factor of the grid)."};
}

// The cohort: which target cells are canonical, required, named by a deviation, and enter the verdict.
std::optional<ReportFigure> cohort_figure(const EvaluationResult& r, const fs::path& dir) {
  if (r.cohort.empty() || (!r.registration_sha256 && r.cohort_verdict.empty())) {
    return std::nullopt;
  }
  report::Figure fig;
  fig.title = "Cohort (" + r.standing + ")";
  fig.width = 1000;
  fig.height = std::max(240, 80 + 28 * int(r.cohort.size()));
  report::Series yes("yes", {}, {}, "points pt 7 ps 1.6 lc rgb '#1b7837'");
  report::Series no("no", {}, {}, "points pt 6 ps 1.6 lc rgb '#b2182b'");
  std::string ytics = "set ytics (";
  for (std::size_t i = 0; i < r.cohort.size(); ++i) {
    const auto& c = r.cohort[i];
    const double y = double(r.cohort.size() - 1 - i);
    const bool flags[4] = {c.canonical, c.in_cohort, !c.deviation.empty(), c.can_enter};
    for (int k = 0; k < 4; ++k) {
      auto& s = flags[k] ? yes : no;
      s.x.push_back(k);
      s.y.push_back(y);
    }
    ytics += (i ? ", " : "") + std::string("'") + c.cell + "' " + num(y);
  }
  fig.series = {yes, no};
  fig.extra = {"set xtics ('canonical' 0, 'required' 1, 'deviation' 2, 'in the verdict' 3)",
               ytics + ")",
               "set xrange [-0.5:3.5]",
               "set yrange [-0.7:" + num(double(r.cohort.size()) - 0.3) + "]",
               "set key below horizontal",
               "set grid"};
  report::render(fig, dir, "cohort");
  return ReportFigure{"cohort",
                      "Every target cell of the sweep: canonical or not, required by this analysis "
                      "(its cohort), named by a deviation, entering the verdict (cohort.csv)."};
}

}  // namespace

std::vector<ReportFigure> draw_evaluation_figures(const EvaluationResult& r, const fs::path& dir) {
  const PredictorEvaluation* primary = primary_predictor(r);
  const std::vector<Drawn> drawn = drawn_tables(r, primary);
  std::vector<ReportFigure> figures;
  auto add = [&](std::optional<ReportFigure> f) {
    if (f) {
      figures.push_back(std::move(*f));
    }
  };
  add(decomposition_figure(r, dir));
  for (auto& f : predictable_cell_figures(r, drawn, primary, dir)) {
    figures.push_back(std::move(f));
  }
  add(anomaly_figure(r, drawn, dir));
  add(skill_by_step_figure(r, drawn, dir));
  add(skill_by_format_figure(r, drawn, dir));
  add(cohort_figure(r, dir));
  return figures;
}

}  // namespace wbaudit::runners::evaluation
