// The CSV tables of the skill report (docs/evaluate.md lists their columns). Numbers at round-trip precision, NaN an
// empty field (util::CsvWriter).
#include <algorithm>
#include <map>

#include "forecast/crossing.hpp"
#include "runners/evaluate/report_rows.hpp"
#include "runners/evaluate/report_writers.hpp"
#include "stats/statistic_table.hpp"
#include "util/csv.hpp"
#include "util/files.hpp"
#include "util/text.hpp"

namespace wbaudit::runners::evaluation {
namespace fs = std::filesystem;
using util::CsvWriter;

namespace {

constexpr int kConfidenceDigits = 6;

const char* truth(bool b) {
  return b ? "true" : "false";
}

// The provenance columns of an interval: confidence, method, resampling, resamples, seed, units.
void interval_provenance(CsvWriter& csv, const stats::Interval& ci) {
  csv.number(ci.confidence, kConfidenceDigits)
      .field(std::string(stats::to_string(ci.method)))
      .field(std::string(stats::to_string(ci.resampling)))
      .integer(ci.resamples)
      .field(std::to_string(ci.seed))
      .integer(ci.n_units);
}

void empty_fields(CsvWriter& csv, int n) {
  for (int k = 0; k < n; ++k) {
    csv.field("");
  }
}

// One row per (predictor, statistic), with its definition and interval provenance.
std::string statistics_csv(const EvaluationResult& r) {
  CsvWriter csv({"predictor", "predictor_label", "statistic", "definition", "estimate", "ci_lower", "ci_upper",
                 "confidence", "method", "resampling", "resamples", "seed", "n_units", "note"});
  for (const auto& row : statistic_rows(r)) {
    csv.field(row.predictor).field(row.label).field(row.statistic).field(stats::statistic_definition(row.statistic));
    csv.number(row.estimate);
    if (row.ci) {
      csv.number(row.ci->lower).number(row.ci->upper);
      interval_provenance(csv, *row.ci);
    } else {
      empty_fields(csv, 8);
    }
    csv.field(row.note).end_row();
  }
  return csv.text();
}

// Per predictor and cell: the cell's metrics and mean anomalies.
std::string cells_csv(const EvaluationResult& r) {
  CsvWriter csv({"predictor", "predictor_label", "cell", "run", "group", "format", "projection", "bias_cell",
                 "mae_cell", "rmse_cell", "mse_cell", "outcome_cell_anomaly", "predictor_cell_anomaly"});
  for (const auto& p : r.predictors) {
    if (!p.unavailable.empty()) {
      continue;
    }
    std::map<std::string, Eigen::Index> dir_index;
    for (std::size_t i = 0; i < p.directional.cells.size(); ++i) {
      dir_index[p.directional.cells[i]] = Eigen::Index(i);
    }
    for (const auto& m : p.metrics.cells) {
      const auto k = std::size_t(std::find(r.cells.begin(), r.cells.end(), m.cell) - r.cells.begin());
      csv.field(p.name).field(predictor_label(p)).field(m.cell).field(r.runs[k]).field(r.groups[k]);
      csv.field(r.formats[k]).field(r.projections[k]);
      csv.number(m.bias_cell).number(m.mae_cell).number(m.rmse_cell).number(m.mse_cell);
      if (auto it = dir_index.find(m.cell); it != dir_index.end()) {
        csv.number(p.directional.outcome_cell_anomaly[it->second])
            .number(p.directional.predictor_cell_anomaly[it->second]);
      } else {
        empty_fields(csv, 2);
      }
      csv.end_row();
    }
  }
  return csv.text();
}

std::string gates_csv(const EvaluationResult& r) {
  CsvWriter csv({"gate", "statistic", "predictor", "comparator", "threshold", "verdict", "estimate", "ci_lower",
                 "ci_upper", "confidence", "method", "resampling", "resamples", "seed", "n_units", "standing",
                 "reasons"});
  for (const auto& g : r.gates) {
    csv.field(g.spec.gate.name).field(g.spec.gate.statistic).field(g.spec.predictor);
    csv.field(std::string(stats::to_string(g.spec.gate.direction))).number(g.spec.gate.threshold);
    csv.field(std::string(stats::to_string(g.result.verdict)));
    if (g.has_interval) {
      const auto& ci = g.result.interval;
      csv.number(ci.estimate).number(ci.lower).number(ci.upper);
      interval_provenance(csv, ci);
    } else {
      empty_fields(csv, 9);
    }
    csv.field(r.standing).field(util::join(g.result.reasons, "; ")).end_row();
  }
  return csv.text();
}

// Every target cell, its identity, whether the analysis requires it, the deviation naming it.
std::string cohort_csv(const EvaluationResult& r) {
  CsvWriter csv({"cell", "canonical", "reason", "in_cohort", "deviation", "enters_verdict"});
  for (const auto& c : r.cohort) {
    csv.row({c.cell, truth(c.canonical), c.reason, truth(c.in_cohort), c.deviation, truth(c.can_enter)});
  }
  return csv.text();
}

std::string decomposition_csv(const EvaluationResult& r) {
  CsvWriter csv(
      {"table", "ss_total", "ss_time", "ss_cell", "ss_residual", "share_time", "share_cell", "share_residual"});
  auto line = [&](const std::string& name, const std::optional<stats::Decomposition>& d) {
    if (d) {
      csv.field(name).number(d->ss_total).number(d->ss_time).number(d->ss_cell).number(d->ss_residual);
      csv.number(d->share_time).number(d->share_cell).number(d->share_residual).end_row();
    }
  };
  line("outcome", r.outcome_decomposition);
  for (const auto& p : r.predictors) {
    line("error:" + p.name, p.error_decomposition);
  }
  return csv.text();
}

// The aligned tables, long format.
std::string series_csv(const EvaluationResult& r) {
  std::vector<std::string> header = {"cell", "step", "outcome"};
  for (const auto& t : r.tables) {
    header.push_back(t.name);
  }
  CsvWriter csv(header);
  for (Eigen::Index i = 0; i < r.outcome.rows(); ++i) {
    for (Eigen::Index k = 0; k < r.outcome.cols(); ++k) {
      csv.field(r.cells[std::size_t(i)]).integer(r.steps[std::size_t(k)]).number(r.outcome.values(i, k));
      for (const auto& t : r.tables) {
        csv.number(t.table.values(i, k));
      }
      csv.end_row();
    }
  }
  return csv.text();
}

// Per predictor and cell: the crossing categories and times.
std::string crossings_csv(const EvaluationResult& r) {
  CsvWriter csv({"predictor", "cell", "category", "measured_status", "predicted_status", "measured_crossing",
                 "predicted_crossing", "relative_error", "within_tolerance"});
  auto time = [](const forecast::Crossing& c) { return c.status == forecast::CrossingStatus::crossed ? c.time : NAN; };
  for (const auto& p : r.predictors) {
    for (const auto& c : p.crossings) {
      csv.field(p.name).field(c.cell).field(std::string(forecast::to_string(c.category)));
      csv.field(std::string(forecast::to_string(c.measured.status)));
      csv.field(std::string(forecast::to_string(c.predicted.status)));
      csv.number(time(c.measured)).number(time(c.predicted)).number(c.relative_error);
      csv.field(truth(c.within_tolerance)).end_row();
    }
  }
  return csv.text();
}

std::string skill_by_step_csv(const EvaluationResult& r) {
  CsvWriter csv({"predictor", "step", "rmse_step", "ci_lower", "ci_upper"});
  for (const auto& p : r.predictors) {
    for (const auto& s : p.by_step) {
      csv.field(p.name).integer(s.step).number(s.rmse).number(s.lower).number(s.upper).end_row();
    }
  }
  return csv.text();
}

std::string breakdown_csv(const EvaluationResult& r) {
  std::vector<std::string> header = {"factor", "level", "predictor", "cells", "rmse_macro"};
  for (const auto& b : r.analysis.baselines) {
    header.push_back(baseline_key(b));
  }
  CsvWriter csv(header);
  for (const auto& b : r.breakdown) {
    csv.field(b.factor).field(b.level).field(b.predictor).integer(b.cells).number(b.rmse_macro);
    for (const auto& base : r.analysis.baselines) {
      auto it = b.skill.find(base);
      if (it == b.skill.end()) {
        csv.field("");
      } else {
        csv.number(it->second);
      }
    }
    csv.end_row();
  }
  return csv.text();
}

// Under a drop policy: what each table dropped.
std::string dropped_csv(const EvaluationResult& r) {
  CsvWriter csv({"table", "kind", "label"});
  for (const auto& d : r.dropped) {
    csv.row({d[0], d[1], d[2]});
  }
  return csv.text();
}

}  // namespace

void write_report_file(const fs::path& path, const std::string& text) {
  util::write_atomic(path, text, /*durable=*/false);
}

void write_evaluation_tables(const EvaluationResult& r, const fs::path& dir) {
  write_report_file(dir / "skill_by_step.csv", skill_by_step_csv(r));
  write_report_file(dir / "breakdown.csv", breakdown_csv(r));
  if (r.analysis.missing != stats::MissingPolicy::error) {
    write_report_file(dir / "dropped.csv", dropped_csv(r));
  }
  write_report_file(dir / "statistics.csv", statistics_csv(r));
  write_report_file(dir / "cells.csv", cells_csv(r));
  write_report_file(dir / "gates.csv", gates_csv(r));
  write_report_file(dir / "cohort.csv", cohort_csv(r));
  write_report_file(dir / "decomposition.csv", decomposition_csv(r));
  write_report_file(dir / "series.csv", series_csv(r));
  write_report_file(dir / "crossings.csv", crossings_csv(r));
  write_report_file(dir / "analysis.toml", r.effective_analysis);
  if (!r.analysis.text.empty()) {
    write_report_file(dir / "analysis_given.toml", r.analysis.text);
  }
}

}  // namespace wbaudit::runners::evaluation
