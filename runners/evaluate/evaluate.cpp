#include "runners/evaluate/evaluate.hpp"

#include <chrono>
#include <ctime>
#include <sstream>

#include "runners/evaluate/cells.hpp"
#include "runners/evaluate/effective_analysis.hpp"
#include "runners/evaluate/evaluation_tables.hpp"
#include "runners/evaluate/gates.hpp"
#include "runners/evaluate/inputs.hpp"
#include "runners/evaluate/report_writers.hpp"
#include "runners/evaluate/scoring.hpp"
#include "runners/evaluate/standing.hpp"
#include "runners/evaluate/templates.hpp"
#include "runners/store/store.hpp"
#include "stats/statistic_table.hpp"
#include "util/files.hpp"
#include "util/text.hpp"

namespace wbaudit::runners {
namespace fs = std::filesystem;

std::string baseline_key(std::string name) {
  return stats::skill_statistic(std::move(name));
}

const PredictorEvaluation& EvaluationResult::predictor(const std::string& name) const {
  for (const auto& p : predictors) {
    if (p.name == name) {
      return p;
    }
  }
  std::vector<std::string> names;
  for (const auto& p : predictors) {
    names.push_back(p.name);
  }
  throw AnalysisError("no predictor \"" + name + "\" in this evaluation (present: " + util::join(names) + ")");
}

EvaluationResult evaluate_sweep(const fs::path& sweep_dir, const EvaluateOptions& options) {
  using namespace evaluation;
  const auto start = std::chrono::steady_clock::now();
  EvaluationResult result;
  result.sweep_dir = sweep_dir;
  SweepInputs in = open_inputs(sweep_dir, options);
  result.sweep_name = in.spec.name;
  result.analysis = in.analysis;
  establish_standing(in, result);
  describe_cohort(in, result);
  const ScoredCells cells = read_scored_cells(in, options, result);
  const TemplateHistory history = build_template_history(in, cells, result);
  const forecast::EvaluationTables tables = build_tables(in, cells, history, result);
  resolve_effective_analysis(in, cells, result);
  const ScoringContext scoring = scoring_context(in.analysis, tables, result);
  decompose_outcome(scoring, result);
  score_predictors(scoring, result);
  judge_gates(in.analysis, in.required, result);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

int gate_check_status(const EvaluationResult& result) {
  if (result.gates.empty()) {
    return kCheckInconclusive;
  }
  bool inconclusive = false;
  for (const auto& g : result.gates) {
    if (g.result.verdict == stats::Verdict::fail) {
      return kCheckFail;
    }
    inconclusive = inconclusive || g.result.verdict != stats::Verdict::pass;
  }
  if (inconclusive) {
    return kCheckInconclusive;
  }
  return result.standing == "retrospective" ? kCheckRetrospectivePass : kCheckPass;
}

std::string gate_summary(const EvaluationResult& result) {
  std::ostringstream out;
  for (const auto& g : result.gates) {
    out << g.spec.gate.name << ": " << g.spec.gate.statistic;
    if (!g.spec.predictor.empty()) {
      out << "(" << g.spec.predictor << ")";
    }
    out << " " << stats::to_string(g.spec.gate.direction) << " " << util::number_text(g.spec.gate.threshold, 6) << ": "
        << stats::to_string(g.result.verdict);
    if (g.has_interval) {
      out << ", " << g.result.interval.describe();
    }
    if (g.result.verdict == stats::Verdict::inconclusive && !g.result.reasons.empty()) {
      out << " (" << g.result.reasons.front() << (g.result.reasons.size() > 1 ? "; ..." : "") << ")";
    }
    out << "\n";
  }
  return out.str();
}

namespace {

// DIR/evaluations/<UTC time>-<first 12 hex of the analysis hash>, with -2, -3, ... when taken.
fs::path fresh_report_dir(const fs::path& sweep_dir, const std::string& hash) {
  const fs::path parent = sweep_dir / "evaluations";
  fs::create_directories(parent);
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  const std::string base = std::string(stamp) + "-" + hash.substr(0, 12);
  std::string name = base;
  for (int k = 2; fs::exists(parent / name); ++k) {
    name = base + "-" + std::to_string(k);
  }
  return parent / name;
}

}  // namespace

fs::path write_evaluation_report(EvaluationResult& r, const EvaluateOptions& options) {
  fs::path final_dir = options.out;
  if (final_dir.empty()) {
    final_dir = fresh_report_dir(r.sweep_dir, r.analysis_sha256);
  } else if (fs::exists(final_dir)) {
    throw StoreError(final_dir.string() + " exists: an evaluation never overwrites an earlier one");
  }
  util::StagedDirectory staged(final_dir);
  fs::create_directories(staged.path() / "figures");
  evaluation::write_evaluation_tables(r, staged.path());
  std::vector<evaluation::ReportFigure> figures;
  if (options.figures) {
    figures = evaluation::draw_evaluation_figures(r, staged.path() / "figures");
  }
  evaluation::write_evaluation_document(r, figures, staged.path(), final_dir);
  staged.commit();
  r.report_dir = final_dir;
  return final_dir;
}

}  // namespace wbaudit::runners
