// The skill report's document (report.md and report.html from one source, runners/report/document.hpp): the facts of
// the evaluation, the gates, the result at a glance, the cohort, a summary and every statistic with its definition,
// skill by grid factor, crossings and the figures.
#include <algorithm>
#include <cctype>

#include "runners/evaluate/gates.hpp"
#include "runners/evaluate/report_rows.hpp"
#include "runners/evaluate/report_writers.hpp"
#include "runners/report/document.hpp"
#include "stats/statistic_table.hpp"
#include "util/text.hpp"

namespace wbaudit::runners::evaluation {
namespace fs = std::filesystem;
using util::join;

namespace {

using Rows = std::vector<std::vector<std::string>>;

std::string num(double x, int precision = 6) {
  return util::number_text(x, precision);
}

std::string shown(double x) {
  return util::shown_number(x);
}

// "95% bca" of the analysis' bootstrap.
std::string interval_kind(const stats::BootstrapSpec& boot) {
  return num(100 * boot.confidence) + "% " + std::string(stats::to_string(boot.method));
}

// Notes are footnoted once each, so a reason shared by many rows is written once.
class Footnotes {
 public:
  std::string ref(const std::string& text) {
    if (text.empty()) {
      return "";
    }
    auto it = std::find(m_notes.begin(), m_notes.end(), text);
    if (it == m_notes.end()) {
      m_notes.push_back(text);
      it = m_notes.end() - 1;
    }
    return "[" + std::to_string(it - m_notes.begin() + 1) + "]";
  }
  std::string text() const {
    std::string out;
    for (std::size_t k = 0; k < m_notes.size(); ++k) {
      out += (k ? " " : "") + std::string("[") + std::to_string(k + 1) + "] " + m_notes[k];
    }
    return out;
  }

 private:
  std::vector<std::string> m_notes;
};

std::string cells_and_steps(const EvaluationResult& r) {
  std::string text = std::to_string(r.cells.size()) + " x " + std::to_string(r.steps.size());
  if (r.analysis.missing != stats::MissingPolicy::error) {
    text += " before " + std::string(stats::to_string(r.analysis.missing)) + "; the outcome kept " +
            std::to_string(r.kept_cells) + " x " + std::to_string(r.kept_steps) + " (" +
            std::to_string(r.dropped.size()) + " drops over all tables, listed in dropped.csv)";
  }
  return text;
}

std::string bootstrap_fact(const EvaluationResult& r) {
  const auto& boot = r.analysis.bootstrap;
  const bool by_run = r.analysis.unit == BootstrapUnit::run;
  return std::to_string(boot.resamples) + " resamples, " + std::string(stats::to_string(boot.method)) + ", seed " +
         std::to_string(boot.seed) + ", confidence " + num(boot.confidence) + ", unit " + (by_run ? "run" : "cell") +
         "; n = " + std::to_string(r.resampling_units) +
         (by_run ? " target runs (training runs, not layer cells)" : " cells") +
         (r.resampling_units < 10 ? ": with so few units an interval may be wide, and a gate whose "
                                    "interval straddles its threshold is inconclusive, never a pass"
                                  : "");
}

void evaluation_section(const EvaluationResult& r, const fs::path& final_dir, report::Document& doc) {
  const fs::path crossing_report = fs::absolute(r.sweep_dir / "report" / "report.html");
  const std::string crossing_link = crossing_report.lexically_relative(fs::absolute(final_dir)).generic_string();
  const Rows facts = {
      {"sweep", r.sweep_name + " (" + r.sweep_dir.string() + ")"},
      {"analysis", r.analysis.name + (r.analysis.path.empty() ? " (built in)" : " (" + r.analysis.path.string() + ")")},
      {"analysis SHA-256", r.analysis_sha256 + " (of the complete effective analysis, analysis.toml)"},
      {"standing", r.standing + (r.standing_reasons.empty() ? "" : ": " + join(r.standing_reasons, "; "))},
      {"registration", r.registration_sha256 ? *r.registration_sha256 : "none"},
      {"outcome", r.analysis.outcome + " y(c,t) = erased / nonzero, per target run and parameter group"},
      {"cells x steps", cells_and_steps(r)},
      {"source", r.source_reference},
      {"source projection", projection_summary(r)},
      {"template", "class " + join(r.analysis.template_class, "/") + ", history: " + r.template_history},
      {"bootstrap", bootstrap_fact(r)},
      {"crossing settings", crossing_settings(r)},
      {"missing values", std::string(stats::to_string(r.analysis.missing))},
      {"target runs left out", r.missing_targets.empty() ? "none" : join(r.missing_targets, "; ")},
      {"computed in", num(r.seconds, 3) + " s"}};
  doc.heading("Evaluation");
  doc.table({"fact", "value"}, facts);
  doc.paragraph(
      "Labels: forecast predictors are scored as forecasts; privileged (matched-reference) needs one fp32 "
      "run per target and is a comparison, never a forecast; post-outcome (common-time) is built from the "
      "outcomes being scored and is descriptive only.");
  doc.links("Tables:", {{"statistics.csv", "statistics.csv"},
                        {"cells.csv", "cells.csv"},
                        {"gates.csv", "gates.csv"},
                        {"cohort.csv", "cohort.csv"},
                        {"decomposition.csv", "decomposition.csv"},
                        {"crossings.csv", "crossings.csv"},
                        {"series.csv", "series.csv"},
                        {"skill_by_step.csv", "skill_by_step.csv"},
                        {"breakdown.csv", "breakdown.csv"},
                        {"analysis.toml (effective)", "analysis.toml"},
                        {"crossing report of the sweep", crossing_link}});
}

void gates_section(const EvaluationResult& r, report::Document& doc) {
  doc.heading("Gates");
  Rows rows;
  for (const auto& g : r.gates) {
    // The baseline a gate compares against: a skill statistic names it; every other statistic has none.
    const auto baseline = stats::skill_baseline(g.spec.gate.statistic);
    rows.push_back({g.spec.gate.name, g.spec.gate.statistic, g.spec.predictor.empty() ? "(outcome)" : g.spec.predictor,
                    baseline ? *baseline : std::string("none"),
                    std::string(stats::to_string(g.spec.gate.direction)) + " " + num(g.spec.gate.threshold),
                    std::string(stats::to_string(g.result.verdict)),
                    g.has_interval ? shown(g.result.interval.estimate) : "—",
                    g.has_interval ? g.result.interval.describe() : "—", join(g.result.reasons, "; ")});
  }
  if (rows.empty()) {
    rows.push_back({"(no gates declared)", "", "", "", "", "", "", "", ""});
  }
  doc.table({"gate", "statistic", "predictor", "baseline", "rule", "verdict", "estimate", "CI", "reasons"}, rows);
}

// An estimate with its interval, or "not scored".
std::string stat_cell(const PredictorEvaluation& p, const std::string& s, double est) {
  if (!p.unavailable.empty()) {
    return "not scored";
  }
  std::string out = shown(est);
  if (auto it = p.intervals.find(s); it != p.intervals.end()) {
    out += " " + ci_text(&it->second);
  }
  return out;
}

// Is accuracy shared time or source-specific transfer? rmse_macro of every predictor side by side, skill, the
// common-time share of the outcome and the directional result of each forecast predictor.
void glance_section(const EvaluationResult& r, report::Document& doc) {
  doc.heading("At a glance");
  Rows rows;
  for (const auto& p : r.predictors) {
    std::string skill;
    for (const auto& b : r.analysis.baselines) {
      if (b == p.name || !p.unavailable.empty()) {
        continue;
      }
      auto it = p.skill.find(b);
      skill += (skill.empty() ? "" : "; ") + b + ": " +
               stat_cell(p, baseline_key(b), it == p.skill.end() ? NAN : it->second);
    }
    std::string directional = "—";
    std::string run_directional = "—";
    if (p.unavailable.empty()) {
      const auto& d = p.directional;
      directional = "anomaly correlation " + stat_cell(p, "anomaly_correlation", d.anomaly_correlation.value_or(NAN)) +
                    "; signs " + std::to_string(d.n_sign_agree) + "/" + std::to_string(d.n_directional) +
                    " (binomial p = " + num(d.binomial_p_value, 3) + ")";
      const auto& rd = p.run_directional;
      run_directional =
          !p.run_directional_note.empty()
              ? std::string("no run-specific signal (its run-level anomaly field is zero)")
              : "anomaly correlation " + stat_cell(p, "run_anomaly_correlation", rd.anomaly_correlation.value_or(NAN)) +
                    "; signs " + std::to_string(rd.n_sign_agree) + "/" + std::to_string(rd.n_directional) +
                    " (binomial p = " + num(rd.binomial_p_value, 3) + ")";
    }
    rows.push_back({p.name, predictor_label(p), stat_cell(p, "rmse_macro", p.metrics.rmse_macro),
                    skill.empty() ? "—" : skill, directional, run_directional});
  }
  doc.table({"predictor", "label", "rmse_macro", "skill", "directional, across cells", "directional, run level"}, rows);
  const auto& d = r.outcome_decomposition;
  std::string share = d ? shown(d->share_time) : std::string("undefined");
  if (auto it = r.outcome_intervals.find("share_time"); it != r.outcome_intervals.end()) {
    share += " " + ci_text(&it->second);
  }
  doc.paragraph("Common time: share_time of the outcome = " + share +
                " (SS_time / SS_total of y = mu + a_t + b_c + e). A large share with a good rmse_macro and skill "
                "but a directional result near chance means the accuracy comes from the shared time course, "
                "not from source-specific transfer. The across-cells directional statistics take anomalies against "
                "the mean over all cells (parameter groups and runs together), so they mostly say which group "
                "erases more; the run-level ones take anomalies against the mean over the runs of the same group, "
                "and answer whether a predictor carries run-specific information (a shared reference cannot). "
                "Bootstrap units: n = " +
                std::to_string(r.resampling_units) + " (" + distinct_resamples_text(r.resampling_units) +
                " distinct resamples; gates need at least " + std::to_string(r.analysis.min_units) +
                " units, [bootstrap] min_units).");
}

void cohort_section(const EvaluationResult& r, report::Document& doc) {
  if (!r.registration_sha256 && r.cohort_verdict.empty()) {
    return;
  }
  doc.heading("Cohort");
  for (auto st : r.cohort_statements) {
    st[0] = char(std::toupper(static_cast<unsigned char>(st[0])));
    doc.paragraph(st + ".");
  }
  if (!r.cohort_verdict.empty()) {
    doc.paragraph("Verdict (" + r.standing + "): " + r.cohort_verdict + ".");
  }
  Rows rows;
  for (const auto& c : r.cohort) {
    rows.push_back({c.cell, c.canonical ? "canonical" : "not canonical", c.canonical ? "—" : c.reason,
                    c.in_cohort ? "yes" : "no", c.deviation.empty() ? "—" : c.deviation,
                    c.can_enter ? "enters" : "left out"});
  }
  doc.table({"cell", "identity", "why not canonical", "required (cohort)", "deviation", "in the verdict"}, rows);
}

// The Summary table's columns: the statistic table's summary columns in order, the skill family once per baseline.
std::vector<std::string> summary_columns(const EvaluationResult& r) {
  std::vector<const stats::StatisticDefinition*> defs;
  for (const auto& def : stats::statistic_table()) {
    if (def.summary_column > 0) {
      defs.push_back(&def);
    }
  }
  std::sort(defs.begin(), defs.end(), [](auto* a, auto* b) { return a->summary_column < b->summary_column; });
  std::vector<std::string> columns;
  for (const auto* def : defs) {
    if (!def->name.ends_with("<baseline>")) {
      columns.emplace_back(def->name);
      continue;
    }
    for (const auto& b : r.analysis.baselines) {
      columns.push_back(baseline_key(b));
    }
  }
  return columns;
}

void summary_section(const EvaluationResult& r, const std::vector<StatisticRow>& stats_rows, Footnotes& notes,
                     report::Document& doc) {
  doc.heading("Summary");
  const std::vector<std::string> columns = summary_columns(r);
  std::vector<std::string> header = {"predictor", "label"};
  header.insert(header.end(), columns.begin(), columns.end());
  Rows rows;
  for (const auto& p : r.predictors) {
    std::vector<std::string> row = {p.name, predictor_label(p)};
    for (const auto& s : columns) {
      const StatisticRow* found = nullptr;
      for (const auto& x : stats_rows) {
        if (x.predictor == p.name && x.statistic == s) {
          found = &x;
        }
      }
      if (!found) {
        row.push_back("—");
        continue;
      }
      std::string cell = shown(found->estimate);
      if (found->ci) {
        cell += " " + ci_text(found->ci);
      }
      if (!found->note.empty() && !found->ci) {
        cell += " " + notes.ref(found->note);
      }
      row.push_back(cell);
    }
    rows.push_back(row);
  }
  doc.paragraph("Each entry: estimate [" + interval_kind(r.analysis.bootstrap) +
                " interval]; a bracketed number refers to the notes below the statistics table.");
  doc.table(header, rows);
}

void statistics_section(const EvaluationResult& r, const std::vector<StatisticRow>& stats_rows, Footnotes& notes,
                        report::Document& doc) {
  const auto& boot = r.analysis.bootstrap;
  doc.heading("Statistics");
  Rows rows;
  for (const auto& row : stats_rows) {
    rows.push_back({row.predictor, row.label, row.statistic, shown(row.estimate), ci_text(row.ci),
                    stats::statistic_definition(row.statistic), notes.ref(row.note)});
  }
  doc.table({"predictor", "label", "statistic", "estimate", "CI", "definition", "note"}, rows);
  doc.paragraph("Intervals: " + interval_kind(boot) + ", " + std::to_string(boot.resamples) + " resamples, seed " +
                std::to_string(boot.seed) +
                ", resampling units = " + (r.analysis.unit == BootstrapUnit::run ? "target runs" : "cells") + ".");
  for (const auto& w : r.warnings) {
    doc.paragraph("Warning: " + w + ".");
  }
  const std::string text = notes.text();
  if (!text.empty()) {
    doc.paragraph("Notes: " + text);
  }
}

void breakdown_section(const EvaluationResult& r, report::Document& doc) {
  doc.heading("Skill by step and by grid factor");
  std::vector<std::string> header = {"factor", "level", "predictor", "cells", "rmse_macro"};
  for (const auto& b : r.analysis.baselines) {
    header.push_back(baseline_key(b));
  }
  Rows rows;
  for (const auto& b : r.breakdown) {
    std::vector<std::string> row = {b.factor, b.level, b.predictor, std::to_string(b.cells), shown(b.rmse_macro)};
    for (const auto& base : r.analysis.baselines) {
      auto it = b.skill.find(base);
      row.push_back(it == b.skill.end() ? "—" : shown(it->second));
    }
    rows.push_back(row);
  }
  doc.paragraph(
      "Point estimates over the cells of each level (no intervals); skill = 1 - sum MSE_P / sum MSE_B over "
      "those cells. The curve per recorded step is in the figure skill_by_step and skill_by_step.csv.");
  if (!rows.empty()) {
    doc.table(header, rows);
  }
}

void crossings_section(const EvaluationResult& r, report::Document& doc) {
  doc.heading("Crossings");
  doc.paragraph("Settings: " + crossing_settings(r) + ".");
  Rows rows;
  for (const auto& p : r.predictors) {
    if (p.crossing) {
      rows.push_back({p.name, predictor_label(p), p.crossing->to_string()});
    }
  }
  doc.table({"predictor", "label", "crossings"}, rows);
  const PredictorEvaluation* primary = primary_predictor(r);
  if (!primary || !primary->crossing) {
    return;
  }
  doc.subheading("By measured crossing-time decade (" + primary->name + ")");
  Rows decades;
  for (const auto& d : primary->crossing->by_decade) {
    decades.push_back(
        {"[" + num(d.lo) + ", " + num(d.hi) + ")", std::to_string(d.measured_crossing), std::to_string(d.both_cross),
         std::to_string(d.within_tolerance) + "/" + std::to_string(d.both_cross), shown(d.median_relative_error)});
  }
  if (!decades.empty()) {
    doc.table({"measured crossing step", "measured crossings", "both cross", "within tolerance", "median rel. error"},
              decades);
  }
}

}  // namespace

void write_evaluation_document(const EvaluationResult& r, const std::vector<ReportFigure>& figures, const fs::path& dir,
                               const fs::path& final_dir) {
  const std::vector<StatisticRow> stats_rows = statistic_rows(r);
  Footnotes notes;
  report::Document doc("Skill report: " + r.sweep_name);
  evaluation_section(r, final_dir, doc);
  gates_section(r, doc);
  glance_section(r, doc);
  cohort_section(r, doc);
  summary_section(r, stats_rows, notes, doc);
  statistics_section(r, stats_rows, notes, doc);
  breakdown_section(r, doc);
  crossings_section(r, doc);
  if (!figures.empty()) {
    doc.heading("Figures");
    for (const auto& f : figures) {
      doc.figure(f.stem, f.caption);
    }
  }
  write_report_file(dir / "report.md", doc.markdown());
  write_report_file(dir / "report.html", doc.html());
}

}  // namespace wbaudit::runners::evaluation
