#include "runners/evaluate/evaluate.hpp"

#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <set>
#include <sstream>

#include "forecast/crossing.hpp"
#include "forecast/error.hpp"
#include "forecast/source.hpp"
#include "runners/evaluate/external_run.hpp"
#include "runners/evaluate/sweep_cells.hpp"
#include "runners/report/document.hpp"
#include "runners/report/figure.hpp"
#include "runners/spec/sweep_spec.hpp"
#include "runners/store/identity.hpp"
#include "runners/store/registry.hpp"
#include "runners/store/store.hpp"
#include "stats/bootstrap_tables.hpp"
#include "stats/error.hpp"
#include "util/csv.hpp"
#include "util/files.hpp"
#include "util/json_path.hpp"
#include "util/text.hpp"

namespace wbaudit::runners {
namespace fs = std::filesystem;
namespace {

using util::csv_field;

// The definition of every reported statistic (docs/statistics.md, docs/science.md section 2); e = forecast - outcome.
const std::map<std::string, std::string>& definitions() {
  static const std::map<std::string, std::string> d = {
      {"bias", "mean over cells of mean_t e (forecast - outcome)"},
      {"mae", "mean over cells of mean_t |e|"},
      {"rmse_cell", "sqrt(mean_t e^2) of one cell"},
      {"rmse_macro", "mean over cells of rmse_cell"},
      {"rmse_pooled", "sqrt(mean over cells of mean_t e^2)"},
      {"skill_vs_template", "1 - sum_c MSE_P / sum_c MSE_template"},
      {"skill_vs_common_time", "1 - sum_c MSE_P / sum_c MSE_common-time"},
      {"sign_agreement_rate", "share of directional cells whose mean anomaly has the outcome's sign"},
      {"binomial_p_value", "P(X >= k), X ~ Binomial(n, 1/2), one-sided exact"},
      {"anomaly_correlation", "correlation over cells and steps of anomalies (value - across-cell mean at t)"},
      {"cell_anomaly_correlation", "correlation over cells of mean anomalies"},
      {"share_time", "SS_time / SS_total of y = mu + a_t + b_c + e (outcome)"},
      {"share_cell", "SS_cell / SS_total (outcome)"},
      {"share_residual", "SS_residual / SS_total (outcome)"},
      {"error_share_time", "SS_time / SS_total of the forecast error table"},
      {"error_share_cell", "SS_cell / SS_total of the forecast error table"},
      {"error_share_residual", "SS_residual / SS_total of the forecast error table"},
  };
  return d;
}

std::string definition(const std::string& statistic) {
  auto it = definitions().find(statistic);
  return it == definitions().end() ? std::string() : it->second;
}

std::string num(double x, int precision = 6) {
  return util::number_text(x, precision);
}

std::string shown(double x, int precision = 4) {
  return util::shown_number(x, precision);
}

using util::join;

// Flattens {"a": {"b": 1}} into {"a.b": 1}.
void flatten(const nlohmann::json& j, const std::string& prefix, std::map<std::string, nlohmann::json>& out) {
  if (j.is_object()) {
    for (auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
  } else {
    out[prefix] = j;
  }
}

std::string value_text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// A sweep directory an analysis names ([source] sweep, [template] history_sweep): relative to the evaluated one.
fs::path other_sweep_dir(const fs::path& sweep_dir, const std::string& given) {
  const fs::path p(given);
  return p.is_absolute() ? p : (sweep_dir / p).lexically_normal();
}

bool matches_any(const std::vector<std::string>& patterns, const std::string& name) {
  for (auto& p : patterns)
    if (::fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

// Interval of a bootstrap, or the reason it could not be computed.
template <class F>
void interval_or_reason(const std::string& statistic, std::map<std::string, stats::Interval>& intervals,
                        std::map<std::string, std::string>& undefined, F&& compute) {
  try {
    intervals[statistic] = compute();
  } catch (const stats::StatsError& e) {
    undefined[statistic] = e.what();
  }
}

// The three decomposition shares, each with its own interval or its own reason (prefix "" or "error_").
void share_intervals(const std::string& prefix, const stats::DecompositionShareIntervals& ci,
                     std::map<std::string, stats::Interval>& intervals, std::map<std::string, std::string>& undefined) {
  const char* names[3] = {"share_time", "share_cell", "share_residual"};
  for (std::size_t k = 0; k < 3; ++k) {
    if (ci.shares[k]) {
      intervals[prefix + names[k]] = *ci.shares[k];
    } else {
      undefined[prefix + names[k]] = ci.reasons[k];
    }
  }
}

// RMSE over cells at each step, with a percentile bootstrap interval over the resampling units (cells of one unit
// together); steps or resamples where a value is missing give NaN. Percentile, not BCa: 60-odd cheap intervals
// for a figure, where a BCa failure on one step would hide the curve.
std::vector<PredictorEvaluation::StepSkill> step_skill(const stats::CellTable& P, const stats::CellTable& Y,
                                                       const std::vector<std::string>& unit_of_cell,
                                                       stats::BootstrapSpec spec) {
  const Eigen::Index C = P.values.rows(), T = P.values.cols();
  std::map<std::string, std::vector<Eigen::Index>> rows_of;
  for (Eigen::Index i = 0; i < C; ++i)
    rows_of[unit_of_cell.empty() ? std::to_string(i) : unit_of_cell[std::size_t(i)]].push_back(i);
  std::vector<std::vector<Eigen::Index>> units;
  for (auto& [u, rows] : rows_of) units.push_back(rows);
  spec.method = stats::IntervalMethod::percentile;
  std::vector<PredictorEvaluation::StepSkill> out;
  for (Eigen::Index k = 0; k < T; ++k) {
    PredictorEvaluation::StepSkill s;
    s.step = P.steps[std::size_t(k)];
    auto rmse = [&](std::span<const std::int64_t> picked) {
      double sum = 0;
      std::int64_t n = 0;
      for (auto u : picked)
        for (auto i : units[std::size_t(u)]) {
          const double e = P.values(i, k) - Y.values(i, k);
          sum += e * e;
          ++n;
        }
      return std::sqrt(sum / double(n));
    };
    std::vector<std::int64_t> all(units.size());
    for (std::size_t u = 0; u < units.size(); ++u) all[u] = std::int64_t(u);
    s.rmse = rmse(all);
    if (std::isfinite(s.rmse) && units.size() >= 2) {
      try {
        auto ci = stats::bootstrap(Kokkos::DefaultHostExecutionSpace{}, std::int64_t(units.size()), rmse, spec);
        s.lower = ci.lower;
        s.upper = ci.upper;
      } catch (const stats::StatsError&) {
        // no interval at this step (e.g. a missing value); the curve keeps its point
      }
    }
    out.push_back(s);
  }
  return out;
}

// rmse_macro and skill against each baseline per level of each factor (format, group, grid parameters), over the
// level's cells (NaN values skipped).
std::vector<BreakdownRow> breakdown_rows(const EvaluationResult& r, const forecast::EvaluationTables& tables,
                                         const std::vector<std::string>& baselines) {
  std::vector<BreakdownRow> out;
  std::set<std::string> factor_names;
  for (auto& f : r.factors)
    for (auto& [k, v] : f) factor_names.insert(k);
  auto mse_of = [&](const stats::CellTable& P, Eigen::Index i) {
    double sum = 0;
    int n = 0;
    for (Eigen::Index k = 0; k < P.values.cols(); ++k) {
      const double e = P.values(i, k) - r.outcome.values(i, k);
      if (std::isnan(e)) continue;
      sum += e * e;
      ++n;
    }
    return n ? sum / n : NAN;
  };
  for (auto& factor : factor_names) {
    std::map<std::string, std::vector<Eigen::Index>> levels;
    for (std::size_t i = 0; i < r.factors.size(); ++i)
      if (auto it = r.factors[i].find(factor); it != r.factors[i].end()) levels[it->second].push_back(Eigen::Index(i));
    if (levels.size() < 2) continue;  // a factor with one level breaks nothing down
    for (auto& p : r.predictors) {
      if (!p.unavailable.empty()) continue;
      const auto& P = tables.predictor(p.name).table;
      for (auto& [level, rows] : levels) {
        BreakdownRow row{factor, level, p.name, int(rows.size()), 0, {}};
        double sum_rmse = 0, sum_mse = 0;
        for (auto i : rows) {
          sum_rmse += std::sqrt(mse_of(P, i));
          sum_mse += mse_of(P, i);
        }
        row.rmse_macro = sum_rmse / double(rows.size());
        for (auto& b : baselines) {
          if (b == p.name) continue;
          double sum_b = 0;
          for (auto i : rows) sum_b += mse_of(tables.predictor(b).table, i);
          row.skill[b] = 1 - sum_mse / sum_b;
        }
        out.push_back(row);
      }
    }
  }
  return out;
}

}  // namespace

std::string baseline_key(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return "skill_vs_" + name;
}

const PredictorEvaluation& EvaluationResult::predictor(const std::string& name) const {
  for (auto& p : predictors)
    if (p.name == name) return p;
  std::vector<std::string> names;
  for (auto& p : predictors) names.push_back(p.name);
  throw AnalysisError("no predictor \"" + name + "\" in this evaluation (present: " + join(names) + ")");
}

EvaluationResult evaluate_sweep(const fs::path& sweep_dir, const EvaluateOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  EvaluationResult result;
  result.sweep_dir = sweep_dir;
  // A directory without sweep.json that holds external runs (wbaudit import): its external runs are scored,
  // exploratory and never canonical. Otherwise the sweep's canonical cells (external runs beside them are not scored).
  const bool external_only = !fs::exists(sweep_dir / "sweep.json") && fs::is_directory(sweep_dir / "external");
  std::optional<SweepStore> store_holder;
  if (!external_only) store_holder.emplace(SweepStore::open(sweep_dir));
  const SweepStore* const store = store_holder ? &*store_holder : nullptr;
  SweepSpec spec;
  if (store) {
    // The spec is read from the frozen copy: refuse one that is not the registered spec, and a sweep whose signed
    // record (journal, sweep.json) was edited (docs/contracts.md, "Signed provenance").
    // Also: registrations the journal records that are gone, and links inside the sweep (docs/contracts.md).
    if (auto problems = store->check_frozen_inputs(), record = store->check_record(),
        missing = missing_registrations(*store), links = store->link_problems();
        !problems.empty() || !record.empty() || !missing.empty() || !links.empty()) {
      for (const auto* more : {&record, &missing, &links}) problems.insert(problems.end(), more->begin(), more->end());
      throw AnalysisError("cannot evaluate " + sweep_dir.string() + ": " + join(problems, "; ") +
                          " (`wbaudit run SPEC --out DIR --resume` with the registered spec and binary restores the "
                          "frozen copies)");
    }
    spec = load_sweep_spec(store->spec_path());
  } else {
    spec.name = fs::absolute(sweep_dir).lexically_normal().filename().string() + " (external runs)";
  }
  result.sweep_name = spec.name;

  // The analysis: given, else the sweep's registration, else the default.
  std::optional<Registration> registration;
  if (options.analysis) {
    result.analysis = load_analysis_spec(*options.analysis);
    registration = find_registration(sweep_dir, result.analysis.text, store);
  } else {
    auto regs = registrations(sweep_dir, store);
    if (regs.size() > 1) {
      std::vector<std::string> list;
      for (auto& r : regs) list.push_back(r.frozen.string());
      throw AnalysisError(sweep_dir.string() + " has " + std::to_string(regs.size()) +
                          " registered analyses; choose one with --analysis (" + join(list, "; ") + ")");
    }
    if (regs.size() == 1) {
      registration = regs.front();
      result.analysis = load_analysis_spec(registration->frozen);
    } else {
      result.analysis = default_analysis_spec();
    }
  }
  const AnalysisSpec& analysis = result.analysis;

  // Required cells: the registration's, else the analysis' patterns, else every target.
  std::vector<std::string> required;
  if (registration) {
    required = registration->outcome_cells;
  } else if (analysis.required_declared) {
    if (!store)
      throw AnalysisError(analysis.path.string() + ": required_cells: " + sweep_dir.string() +
                          " holds only external runs, which are never canonical and cannot be required cells");
    for (auto& pattern : analysis.required_cells) {
      bool matched = false;
      for (auto& c : store->cells()) {
        if (::fnmatch(pattern.c_str(), c.name.c_str(), 0) != 0) continue;
        matched = true;
        if (std::find(required.begin(), required.end(), c.name) == required.end()) required.push_back(c.name);
      }
      if (!matched)
        throw AnalysisError(analysis.path.string() + ": required_cells: \"" + pattern +
                            "\" matches no cell of the sweep " + sweep_dir.string());
    }
  } else if (store) {
    for (auto& c : store->cells())
      if (c.role == "target") required.push_back(c.name);
  }

  // Standing: preregistered, retrospective (registered so, or under a deviation) or exploratory.
  if (registration && !registration->signature_problem.empty()) {
    // An edited or hand-made registration establishes nothing: exploratory, and said why.
    result.standing = "not preregistered (the registration is not verified)";
    result.standing_reasons.push_back("registration " + registration->sha256.substr(0, 12) + ": " +
                                      registration->signature_problem);
    registration.reset();
  }
  if (registration) {
    result.registration_sha256 = registration->sha256;
    result.standing = "preregistered";
    if (registration->retrospective) {
      result.standing = "retrospective";
      result.standing_reasons.push_back("registered with --retrospective on " + registration->registered + " (" +
                                        std::to_string(registration->outcomes_present_at_registration.size()) +
                                        " outcomes already present)");
    }
  } else if (result.standing.empty()) {
    result.standing = "not preregistered (exploratory)";
  }
  for (const auto& d : read_deviations(sweep_dir, store)) {
    if (!d.signature_problem.empty())
      result.standing_reasons.push_back("deviation log line " + std::to_string(d.line) + ": " + d.signature_problem);
    bool touches = d.cells.empty();
    for (auto& c : d.cells) touches = touches || std::find(required.begin(), required.end(), c) != required.end();
    if (!touches) continue;
    if (registration) result.standing = "retrospective";
    result.standing_reasons.push_back("deviation " + d.when + " by " + d.who + ": " + d.what + " (why: " + d.why + ")" +
                                      (d.cells.empty() ? "" : "; cells: " + join(d.cells)));
  }

  // Evaluation cells from canonical complete traces (or, without a sweep, from the external runs).
  std::optional<TraceCache> cache_holder;
  std::optional<ExternalEvaluationCells> external;
  SweepEvaluationCells read;
  if (store) {
    cache_holder.emplace(*store);
    read = read_sweep_evaluation_cells(*store, spec, *cache_holder, analysis.groups);
  } else {
    if (!analysis.scored_runs.empty() || !analysis.source_sweep.empty() || !analysis.source_overrides.empty())
      throw AnalysisError(analysis.path.string() + ": analysis.scored_runs, source.sweep and source.overrides " +
                          "need a sweep; " + sweep_dir.string() + " holds only external runs");
    external.emplace(read_external_evaluation_cells(sweep_dir, analysis.groups, options.external_reference));
    read = std::move(external->cells);
    result.standing = "exploratory: external runs (wbaudit import), never canonical";
    for (auto& p : external->provenance) result.standing_reasons.push_back(p);
  }
  // history = "declared" draws from every target run of the sweep, scored or not (those scored are refused below).
  const std::vector<SweepEvaluationCell> sweep_cells =
      analysis.history_declared ? read.cells : std::vector<SweepEvaluationCell>{};
  if (!analysis.scored_runs.empty()) {
    // A declared cohort: only its target runs are scored (and serve as leave-run-out history).
    for (auto& pattern : analysis.scored_runs) {
      bool matched = false;
      for (auto& c : store->cells())
        matched = matched || (c.role == "target" && ::fnmatch(pattern.c_str(), c.name.c_str(), 0) == 0);
      if (!matched)
        throw AnalysisError(analysis.path.string() + ": analysis.scored_runs: \"" + pattern +
                            "\" matches no target run of the sweep " + sweep_dir.string());
    }
    std::erase_if(read.cells,
                  [&](const SweepEvaluationCell& c) { return !matches_any(analysis.scored_runs, c.target->name); });
    std::vector<std::string> missing, names;
    for (std::size_t k = 0; k < read.missing_names.size(); ++k) {
      if (!matches_any(analysis.scored_runs, read.missing_names[k])) continue;
      missing.push_back(read.missing[k]);
      names.push_back(read.missing_names[k]);
    }
    read.missing = missing;
    read.missing_names = names;
  }
  result.missing_targets = read.missing;

  // `source`: the declared reference, or the reference with the declared one's configuration and the overrides
  // (of this sweep, or of the sweep directory [source] sweep names).
  std::optional<SweepStore> source_store;
  std::optional<TraceCache> source_cache_own;
  if (!analysis.source_sweep.empty()) {
    const fs::path dir = other_sweep_dir(sweep_dir, analysis.source_sweep);
    try {
      source_store.emplace(SweepStore::open(dir));
    } catch (const std::exception& e) {
      throw AnalysisError(analysis.path.string() + ": source.sweep: \"" + analysis.source_sweep +
                          "\" is not a readable sweep directory (" + dir.string() + "): " + e.what());
    }
    source_cache_own.emplace(*source_store);
  }
  const SweepStore* sstore = source_store ? &*source_store : store;  // null only without a sweep (no source_of)
  TraceCache* scache = source_cache_own ? &*source_cache_own : cache_holder ? &*cache_holder : nullptr;
  std::map<std::string, const StoredCell*> source_of;  // by target name
  if (external) {
    result.source_reference = "the external reference run " + external->reference +
                              " (imported; its seed, init and data order are whatever its training script used)";
  } else if (analysis.source_overrides.empty() && analysis.source_sweep.empty()) {
    result.source_reference = "each target's declared fp32 reference (same seed, init and data order)";
  } else {
    result.source_reference =
        "the fp32 reference with the declared one's configuration" +
        (analysis.source_overrides.empty() ? std::string() : " and " + analysis.source_overrides.dump()) +
        (analysis.source_sweep.empty()
             ? std::string()
             : " from the sweep " + analysis.source_sweep + " (" + sstore->dir().string() + ")") +
        " (a predeclared trace, not matched)";
    std::map<std::string, nlohmann::json> overrides;
    flatten(analysis.source_overrides, "", overrides);
    for (auto& c : read.cells) {
      if (source_of.contains(c.target->name)) continue;
      nlohmann::json wanted = c.reference->config;
      for (auto& [path, value] : overrides) util::set_json_at(wanted, path, value);
      const StoredCell* found = nullptr;
      for (auto& s : sstore->cells())
        if (s.role == "reference" && s.config == wanted) found = &s;
      if (!found)
        throw AnalysisError(analysis.path.string() + ": " +
                            (analysis.source_overrides.empty() ? "source.sweep" : "source.overrides") +
                            ": no reference run of the sweep " + sstore->dir().string() + " has " + c.reference->name +
                            "'s configuration" +
                            (analysis.source_overrides.empty() ? "" : " with " + analysis.source_overrides.dump()) +
                            " (needed by " + c.target->name + ")");
      source_of[c.target->name] = found;
    }
  }

  // A target whose source trace is missing is missing for this analysis.
  std::vector<SweepEvaluationCell> cells;
  std::map<std::string, std::string> extra_missing;
  for (auto& c : read.cells) {
    auto it = source_of.find(c.target->name);
    if (it != source_of.end() && !scache->trace(it->second->id)) {
      extra_missing[c.target->name] =
          "its source reference " + it->second->name + " is incomplete (" + scache->problem(it->second->id) + ")";
      continue;
    }
    cells.push_back(c);
  }
  for (auto& [name, why] : extra_missing) {
    result.missing_targets.push_back(name + " (" + why + ")");
    read.missing_names.push_back(name);
  }

  // Required-cell states for the gates.
  for (auto& name : required) {
    stats::CellStatus st;
    st.cell = name;
    const StoredCell* stored = store ? store->find_by_name(name) : nullptr;
    if (!stored) {
      st.reason = "not a cell of this sweep";
    } else {
      auto status = store->cell_status(stored->id);
      st.present = status.state != CellState::pending || !status.attempts.empty();
      st.canonical = status.state == CellState::done;
      if (!st.canonical) {
        st.reason = status.state == CellState::pending ? std::string("missing") : to_string(status.state);
        if (!status.reasons.empty()) st.reason += ": " + status.reasons.front();
      } else if (std::find(read.missing_names.begin(), read.missing_names.end(), name) != read.missing_names.end()) {
        st.canonical = false;
        for (auto& m : result.missing_targets)
          if (m.rfind(name + " (", 0) == 0) st.reason = m.substr(name.size() + 2, m.size() - name.size() - 3);
      }
    }
    result.required.push_back(st);
  }

  // The cohort table: every target cell, canonical or not, in this analysis' cohort (its required cells) or not,
  // and named by a deviation (a recovered cell) or not. (None without a sweep.)
  if (store) {
    const auto deviations = read_deviations(sweep_dir);
    auto named_by = [&](const StoredCell& c) -> std::string {
      for (auto& d : deviations)
        for (auto& n : d.cells)
          if (n == c.name || n == c.id) return d.when + " by " + d.who + ": " + d.what;
      return "";
    };
    auto state_of = [&](const StoredCell& c, std::string& reason) {
      auto status = store->cell_status(c.id);
      if (status.state == CellState::done) return true;
      reason = status.state == CellState::pending ? std::string("missing") : to_string(status.state);
      if (!status.reasons.empty()) reason += ": " + status.reasons.front();
      return false;
    };
    std::size_t incomplete = 0;
    std::vector<std::string> not_canonical;
    for (auto& c : store->cells()) {
      if (c.role != "target") continue;
      CohortRow row;
      row.cell = c.name;
      row.canonical = state_of(c, row.reason);
      row.in_cohort = std::find(required.begin(), required.end(), c.name) != required.end();
      row.deviation = named_by(c);
      row.can_enter = row.canonical && row.in_cohort;
      if (row.in_cohort && !row.canonical) {
        ++incomplete;
        not_canonical.push_back(c.name);
      }
      result.cohort.push_back(row);
    }
    result.cohort_statements.push_back(
        "this analysis' cohort (its " + std::to_string(required.size()) + " required cells) is " +
        (incomplete == 0
             ? std::string("complete: every one is canonical")
             : "incomplete: " + std::to_string(incomplete) + " not canonical (" + join(not_canonical) + ")"));
    for (const auto& reg : registrations(sweep_dir)) {
      if (registration && reg.sha256 == registration->sha256) continue;
      std::vector<std::string> bad;
      for (auto& name : reg.outcome_cells) {
        const StoredCell* c = store->find_by_name(name);
        std::string reason;
        if (!c || !state_of(*c, reason)) bad.push_back(name);
      }
      result.cohort_statements.push_back(
          "the " + std::string(reg.retrospective ? "retrospective" : "prospective") + " registration " +
          reg.sha256.substr(0, 12) + " (" + reg.registered + ") requires " + std::to_string(reg.outcome_cells.size()) +
          " cells: " + (bad.empty() ? std::string("complete") : "incomplete, not canonical: " + join(bad)));
    }
    std::vector<std::string> barred;
    for (auto& row : result.cohort) {
      if (row.deviation.empty()) continue;
      std::string why =
          row.can_enter ? "can enter the cohort (canonical and required)"
          : !row.in_cohort && !row.canonical
              ? "cannot enter the cohort: it is not among its cells, and it is not canonical (" + row.reason + ")"
          : !row.in_cohort ? "cannot enter the cohort: it is not among its cells"
                           : "cannot enter the cohort: it is not canonical (" + row.reason + ")";
      result.cohort_statements.push_back("recovered cell " + row.cell + " (deviation " + row.deviation + ") " + why);
      if (!row.can_enter) barred.push_back(row.cell);
    }
    bool any_deviated = false;
    for (auto& row : result.cohort) any_deviated = any_deviated || !row.deviation.empty();
    if (any_deviated) {
      if (!barred.empty()) {
        bool disjoint = true;
        for (auto& row : result.cohort)
          if (!row.deviation.empty() && row.in_cohort) disjoint = false;
        result.cohort_verdict =
            "negative: the recovered cell" + std::string(barred.size() > 1 ? "s " : " ") + join(barred) +
            (barred.size() > 1 ? " cannot" : " cannot") + " enter this analysis' cohort" +
            (disjoint && incomplete == 0 ? " (the complete cohort is disjoint from it)" : "") +
            ", so the outcome of the protocol's full design is not recovered: the gates below speak for the " +
            std::to_string(required.size()) + " cohort cells only" +
            (incomplete == 0 ? "" : ", and with the cohort incomplete they are inconclusive");
      } else {
        result.cohort_verdict =
            "the recovered cells enter the cohort (canonical and required); the verdicts follow the gates, labelled " +
            result.standing;
      }
    }
  }

  if (cells.empty())
    throw AnalysisError("no evaluation cell in " + sweep_dir.string() + ": no target run has a canonical complete " +
                        "trace with its reference (" + join(result.missing_targets, "; ") + ")");

  // Template classes and history.
  auto class_of = [&](const SweepEvaluationCell& c) {
    std::string out;
    for (auto& key : analysis.template_class) {
      std::string value;
      if (key == "format") {
        value = c.format;
      } else if (key == "group") {
        value = c.group;
      } else if (key == "policy") {
        value = c.policy;
      } else if (c.params.contains(key)) {
        value = value_text(c.params[key]);
      } else if (const auto* node = util::json_at(c.target->config, key)) {
        value = value_text(*node);
      } else {
        throw AnalysisError(analysis.path.string() + ": template.class: \"" + key +
                            "\" is neither format, group, policy, a grid parameter nor a configuration path of " +
                            c.target->name);
      }
      out += (out.empty() ? "" : "/") + key + "=" + value;
    }
    return out;
  };
  std::vector<forecast::HistoryRun> history;
  // Kept alive for the history's traces: the history sweep's store, spec, traces and cells.
  std::optional<SweepStore> history_store;
  std::optional<TraceCache> history_cache;
  std::optional<SweepEvaluationCells> history_read;
  if (analysis.history_declared) {
    // Runs of this sweep declared historical: never a scored run, so no outcome being scored enters a template.
    const std::string where = analysis.path.string() + ": template.history_cells";
    std::set<std::string> runs_used, known_classes;
    for (auto& c : sweep_cells) {
      if (!matches_any(analysis.history_cells, c.target->name)) continue;
      if (analysis.scored_runs.empty() || matches_any(analysis.scored_runs, c.target->name))
        throw AnalysisError(where + ": the run " + c.target->name + " is declared historical and is also scored (" +
                            (analysis.scored_runs.empty()
                                 ? std::string("analysis.scored_runs is not declared, so every target run is scored")
                                 : "it matches analysis.scored_runs " + join(analysis.scored_runs)) +
                            "): the history must not contain the outcomes being scored");
      history.push_back({c.target->name, class_of(c), forecast::measured_series(*c.target_trace, c.group)});
      known_classes.insert(history.back().template_class);
      runs_used.insert(c.target->name);
    }
    if (runs_used.empty())
      throw AnalysisError(where + " " + join(analysis.history_cells) + " matches no complete target run of " +
                          sweep_dir.string());
    if (!analysis.template_missing_inconclusive) {
      for (auto& c : cells) {
        const std::string k = class_of(c);
        if (known_classes.contains(k)) continue;
        throw AnalysisError(where + " " + join(analysis.history_cells) +
                            ": no historical run of the template class \"" + k + "\" (needed by " + c.target->name +
                            "; its classes: " + join({known_classes.begin(), known_classes.end()}) +
                            "); declare such runs historical, or template.missing_class = \"inconclusive\"");
      }
    }
    result.template_history = "the " + std::to_string(runs_used.size()) + " target runs of this sweep declared " +
                              "historical (" + join(analysis.history_cells) + "), none of them scored (outcome-blind)";
  } else if (analysis.history_sweep.empty()) {
    for (auto& c : cells) {
      if (!analysis.history_cells.empty() && !matches_any(analysis.history_cells, c.target->name)) continue;
      history.push_back({c.target->name, class_of(c), forecast::measured_series(*c.target_trace, c.group)});
    }
    result.template_history =
        "the sweep's target runs" +
        (analysis.history_cells.empty() ? std::string() : " matching " + join(analysis.history_cells)) +
        ", leave-run-out (outcome-blind)";
  } else {
    // An earlier sweep: its canonical target runs are the history. Never the scored outcomes: a history run with the
    // configuration (cell id) of a scored target run would be that outcome itself, and is refused.
    const fs::path dir = other_sweep_dir(sweep_dir, analysis.history_sweep);
    const std::string where = analysis.path.string() + ": template.history_sweep: \"" + analysis.history_sweep + "\"";
    try {
      history_store.emplace(SweepStore::open(dir));
    } catch (const std::exception& e) {
      throw AnalysisError(where + " is not a readable sweep directory (" + dir.string() + "): " + e.what());
    }
    const SweepSpec history_spec = load_sweep_spec(history_store->spec_path());
    history_cache.emplace(*history_store);
    std::vector<std::string> groups = analysis.groups.empty() ? spec.evaluation.groups : analysis.groups;
    if (groups.empty())
      for (auto& c : cells)
        if (std::find(groups.begin(), groups.end(), c.group) == groups.end()) groups.push_back(c.group);
    history_read.emplace(read_sweep_evaluation_cells(*history_store, history_spec, *history_cache, groups));
    std::set<std::string> scored_ids;
    if (store) {
      for (auto& c : store->cells())
        if (c.role == "target") scored_ids.insert(c.id);
    } else {
      for (auto& c : cells) scored_ids.insert(c.target->id);
    }
    std::set<std::string> runs_used;
    for (auto& h : history_read->cells) {
      if (!analysis.history_cells.empty() && !matches_any(analysis.history_cells, h.target->name)) continue;
      if (scored_ids.contains(h.target->id))
        throw AnalysisError(where + ": its run " + h.target->name + " has the configuration (cell id " +
                            h.target->id.substr(0, 12) + ") of a target run of the scored sweep " + sweep_dir.string() +
                            ": the history must not contain the outcomes being scored");
      // Prefixed, so that leave-run-out (by run id) never matches a scored run of the same name.
      history.push_back({analysis.history_sweep + ":" + h.target->name, class_of(h),
                         forecast::measured_series(*h.target_trace, h.group)});
      runs_used.insert(h.target->name);
    }
    std::set<std::string> known_classes;
    for (auto& h : history) known_classes.insert(h.template_class);
    if (!analysis.template_missing_inconclusive) {
      for (auto& c : cells) {
        const std::string k = class_of(c);
        if (known_classes.contains(k)) continue;
        throw AnalysisError(
            where + " (" + dir.string() + ") has no canonical target run of the template class \"" + k +
            "\" (needed by " + c.target->name + "; its classes: " +
            (known_classes.empty() ? std::string("none") : join({known_classes.begin(), known_classes.end()})) +
            (history_read->missing.empty() ? std::string() : "; its runs left out: " + join(history_read->missing)) +
            "); add such runs to the history, or declare template.missing_class = \"inconclusive\"");
      }
    }
    result.template_history =
        "the " + std::to_string(runs_used.size()) + " canonical target runs of the sweep " + analysis.history_sweep +
        " (" + dir.string() + ")" +
        (analysis.history_cells.empty() ? std::string() : " matching " + join(analysis.history_cells)) +
        ", never the scored runs (outcome-blind)" +
        (history_read->missing.empty() ? std::string() : "; left out: " + join(history_read->missing));
  }

  auto has = [&](const std::string& p) {
    return std::find(analysis.predictors.begin(), analysis.predictors.end(), p) != analysis.predictors.end();
  };
  std::vector<forecast::EvaluationCell> ecells;
  for (auto& c : cells) {
    forecast::EvaluationCell e;
    e.run_id = c.target->name;
    e.group = c.group;
    e.format = c.format;
    e.projection = c.projection;
    e.template_class = class_of(c);
    e.outcome = forecast::measured_series(*c.target_trace, c.group);
    auto src = source_of.find(c.target->name);
    e.reference = src == source_of.end() ? c.reference_trace : scache->trace(src->second->id);
    if (has("matched-reference")) e.matched_reference = c.reference_trace;
    const auto* lr_t = util::json_at(c.target->config, "optimizer.lr");
    const StoredCell* src_cell = src == source_of.end() ? c.reference : src->second;
    const auto* lr_r = util::json_at(src_cell->config, "optimizer.lr");
    if (lr_t && lr_r && lr_t->is_number() && lr_r->is_number() && lr_r->get<double>() > 0)
      e.lr_scale = lr_t->get<double>() / lr_r->get<double>();
    ecells.push_back(std::move(e));
    result.runs.push_back(c.target->name);
    result.groups.push_back(c.group);
    result.formats.push_back(c.format);
    result.projections.push_back(c.projection);
    result.group_sizes.push_back(c.target_trace->group(c.group).size);
    std::map<std::string, std::string> factors = {{"format", c.format}, {"group", c.group}};
    for (auto& [k, v] : c.params.items()) factors[k] = value_text(v);
    result.factors.push_back(std::move(factors));
    if (!c.projection_note.empty())
      result.projection_notes.push_back(evaluation_cell_label(c.target->name, c.group) + ": " + c.projection_note);
  }

  forecast::TableOptions topt;
  topt.source = has("source");
  if (analysis.source_method == "analytic-grid") {
    topt.source_method = forecast::TableOptions::SourceMethod::analytic_grid;
  }
  result.source_method = analysis.source_method;
  topt.analytic_grid = has("analytic-grid");
  topt.template_mean = has("template");
  topt.common_time = has("common-time");
  topt.missing_class =
      analysis.template_missing_inconclusive ? forecast::MissingClass::missing : forecast::MissingClass::error;
  forecast::EvaluationTables tables;
  try {
    tables = forecast::build_evaluation_tables(ecells, history, topt);
  } catch (const forecast::ForecastError& e) {
    std::string left_out;
    if (!result.missing_targets.empty())
      left_out = " (target runs left out: " + join(result.missing_targets, "; ") + ")";
    throw AnalysisError(std::string("building the predictor tables of ") + sweep_dir.string() + ": " + e.what() +
                        left_out);
  }
  result.outcome = tables.outcome;
  result.cells = tables.outcome.cells;
  result.steps = tables.outcome.steps;
  result.tables = tables.predictors;
  std::vector<std::string> unit_of_cell;
  if (analysis.unit == BootstrapUnit::run) unit_of_cell = result.runs;
  result.resampling_units = analysis.unit == BootstrapUnit::run
                                ? std::set<std::string>(result.runs.begin(), result.runs.end()).size()
                                : result.cells.size();
  const auto& boot = analysis.bootstrap;
  const auto policy = analysis.missing;

  // The outcome's decomposition.
  try {
    result.outcome_decomposition = stats::decompose(tables.outcome, policy);
    share_intervals("", stats::bootstrap_decomposition_shares(tables.outcome, boot, unit_of_cell, policy),
                    result.outcome_intervals, result.outcome_undefined);
  } catch (const stats::StatsError& e) {
    for (auto* s : {"share_time", "share_cell", "share_residual"}) result.outcome_undefined[s] = e.what();
  }

  result.crossing_options.threshold = analysis.threshold.value_or(spec.evaluation.threshold);
  BurnIn burn_in = crossing_burn_in(spec, analysis.burn_in, "declared in the analysis' [crossing]");
  if (!store && !analysis.burn_in) {
    // External runs: no spec, so the shortest imported target run's length.
    std::int64_t steps = -1;
    for (auto& c : cells) steps = steps < 0 ? c.target_trace->steps : std::min(steps, c.target_trace->steps);
    burn_in = {forecast::default_burn_in(steps), "default: 0.5% (" + std::to_string(forecast::kDefaultBurnInPerMille) +
                                                     " per mille) of the " + std::to_string(steps) +
                                                     " steps of the shortest external target run"};
  }
  result.crossing_options.burn_in = burn_in.steps;
  result.burn_in_how = burn_in.how;
  result.crossing_options.min_group_size = analysis.min_group_size.value_or(spec.evaluation.min_group_size);
  {
    // The analysis is identified by its complete effective text (every default explicit), not by the text given.
    std::vector<std::string> groups = analysis.groups.empty() ? spec.evaluation.groups : analysis.groups;
    if (groups.empty())
      for (auto& g : result.groups)
        if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
    result.effective_analysis =
        effective_analysis_toml(analysis, groups,
                                {result.crossing_options.threshold, *result.crossing_options.burn_in,
                                 result.crossing_options.tolerance, result.crossing_options.min_group_size});
    result.analysis_sha256 = sha256_hex(result.effective_analysis);
  }
  result.crossing_options.tolerance = analysis.tolerance.value_or(spec.evaluation.tolerance);

  // Baselines unavailable when their table has rows without history.
  std::map<std::string, std::string> baseline_unavailable;
  for (auto& t : tables.predictors) {
    if (!t.missing_cells.empty())
      baseline_unavailable[t.name] = "template classes without history (declared inconclusive) for " +
                                     std::to_string(t.missing_cells.size()) + " cells: " + join(t.missing_cells);
  }

  auto is_baseline = [&](const std::string& n) {
    return std::find(analysis.baselines.begin(), analysis.baselines.end(), n) != analysis.baselines.end();
  };
  for (const auto& name : analysis.predictors) {
    const forecast::PredictorTable& pt = tables.predictor(name);
    PredictorEvaluation p;
    p.name = name;
    p.privileged = pt.privileged;
    p.post_outcome = pt.post_outcome;
    if (auto it = baseline_unavailable.find(name); it != baseline_unavailable.end()) {
      p.unavailable = it->second;
      result.predictors.push_back(std::move(p));
      continue;
    }
    // A table identical to one already scored (e.g. matched-reference when the source is the declared, same-seed
    // reference) has identical statistics: reuse them rather than rerun every bootstrap.
    const PredictorEvaluation* twin = nullptr;
    for (const auto& done : result.predictors) {
      if (!done.unavailable.empty() || is_baseline(done.name) || is_baseline(name)) continue;
      const auto& other = tables.predictor(done.name).table.values;
      if (other.rows() == pt.table.values.rows() && other.cols() == pt.table.values.cols() &&
          ((other.array() == pt.table.values.array()) || (other.array().isNaN() && pt.table.values.array().isNaN()))
              .all())
        twin = &done;
    }
    if (twin) {
      PredictorEvaluation copy = *twin;
      copy.name = p.name;
      copy.privileged = p.privileged;
      copy.post_outcome = p.post_outcome;
      copy.identical_to = twin->name;
      result.predictors.push_back(std::move(copy));
      continue;
    }
    const auto& P = pt.table;
    const auto& Y = tables.outcome;
    p.metrics = stats::evaluate_metrics(P, Y, policy);
    for (auto* m : {"bias", "mae", "rmse_macro", "rmse_pooled"}) {
      interval_or_reason(m, p.intervals, p.undefined, [&] {
        return stats::bootstrap_metric(stats::table_metric_from_name(m), P, Y, boot, unit_of_cell, policy);
      });
    }
    for (auto& b : analysis.baselines) {
      if (b == name) continue;
      const std::string key = baseline_key(b);
      if (auto it = baseline_unavailable.find(b); it != baseline_unavailable.end()) {
        p.undefined[key] = it->second;
        continue;
      }
      const auto& B = tables.predictor(b).table;
      try {
        p.skill[b] = stats::evaluate_skill(P, B, Y, policy).skill;
      } catch (const stats::StatsError& e) {
        p.undefined[key] = e.what();
        continue;
      }
      interval_or_reason(key, p.intervals, p.undefined,
                         [&] { return stats::bootstrap_skill(P, B, Y, boot, unit_of_cell, policy); });
    }
    stats::DirectionalOptions dopt;
    dopt.missing_policy = policy;
    p.directional = stats::directional_specificity(P, Y, dopt);
    {
      bool flat = true;  // the predictor equal across cells at every step (NaN ignored)
      for (Eigen::Index k = 0; k < P.values.cols() && flat; ++k) {
        double lo = INFINITY, hi = -INFINITY;
        for (Eigen::Index i = 0; i < P.values.rows(); ++i) {
          const double v = P.values(i, k);
          if (std::isnan(v)) continue;
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
        flat = !(hi > lo);
      }
      if (flat)
        p.directional_note =
            "its anomaly field is exactly zero (the predictor has the same value for every cell at "
            "each step), so no cell is directional and the anomaly correlations are undefined";
    }
    try {
      auto ci = stats::bootstrap_directional(P, Y, boot, unit_of_cell, dopt);
      p.intervals["sign_agreement_rate"] = ci.sign_agreement_rate;
      p.intervals["anomaly_correlation"] = ci.anomaly_correlation;
      p.intervals["cell_anomaly_correlation"] = ci.cell_anomaly_correlation;
    } catch (const stats::StatsError& e) {
      for (auto* s : {"sign_agreement_rate", "anomaly_correlation", "cell_anomaly_correlation"})
        p.undefined[s] = e.what();
    }
    try {
      p.error_decomposition = stats::decompose_forecast_error(P, Y, policy);
      share_intervals("error_",
                      stats::bootstrap_decomposition_shares(stats::forecast_error(P, Y), boot, unit_of_cell, policy),
                      p.intervals, p.undefined);
    } catch (const stats::StatsError& e) {
      p.error_decomposition_note = e.what();
      for (auto* s : {"error_share_time", "error_share_cell", "error_share_residual"}) p.undefined[s] = e.what();
    }
    if (!p.post_outcome) {
      try {
        auto cmp = forecast::compare_crossings(P, Y, result.crossing_options, result.group_sizes);
        p.crossing = cmp.summary;
        p.crossings = std::move(cmp.cells);
      } catch (const forecast::ForecastError&) {
        // No crossing summary (e.g. every cell undetermined); the report says so.
      }
    }
    p.by_step = step_skill(P, Y, unit_of_cell, boot);
    for (auto& c : p.metrics.dropped_cells) result.dropped.push_back({name, "cell", c});
    for (auto s : p.metrics.dropped_steps) result.dropped.push_back({name, "step", std::to_string(s)});
    result.predictors.push_back(std::move(p));
  }
  result.breakdown = breakdown_rows(result, tables, analysis.baselines);
  if (result.outcome_decomposition) {
    result.kept_cells = result.outcome_decomposition->cells.size();
    result.kept_steps = result.outcome_decomposition->steps.size();
    for (auto& c : result.outcome_decomposition->dropped_cells) result.dropped.push_back({"outcome", "cell", c});
    for (auto s : result.outcome_decomposition->dropped_steps)
      result.dropped.push_back({"outcome", "step", std::to_string(s)});
  } else {
    result.kept_cells = result.cells.size();
    result.kept_steps = result.steps.size();
  }

  // Gates.
  for (const auto& g : analysis.gates) {
    GateEvaluation ge;
    ge.spec = g;
    ge.spec.gate.required_cells = required;
    const std::map<std::string, stats::Interval>* intervals = &result.outcome_intervals;
    const std::map<std::string, std::string>* undefined = &result.outcome_undefined;
    std::string unavailable;
    if (!g.predictor.empty()) {
      const auto& p = result.predictor(g.predictor);
      intervals = &p.intervals;
      undefined = &p.undefined;
      unavailable = p.unavailable;
    }
    auto it = intervals->find(g.gate.statistic);
    if (unavailable.empty() && it != intervals->end()) {
      ge.result = stats::evaluate_gate(ge.spec.gate, it->second, result.required);
      ge.has_interval = true;
    } else {
      // No interval: inconclusive, with the reason (and the required-cell reasons).
      ge.result.gate = ge.spec.gate;
      ge.result.verdict = stats::Verdict::inconclusive;
      std::string why = !unavailable.empty() ? "predictor " + g.predictor + " not scored: " + unavailable
                        : undefined->contains(g.gate.statistic)
                            ? g.gate.statistic + " has no interval: " + undefined->at(g.gate.statistic)
                            : g.gate.statistic + " was not computed";
      ge.result.reasons.push_back(why);
      for (auto& c : result.required)
        if (!c.canonical) ge.result.reasons.push_back("required cell " + c.cell + ": " + c.reason);
    }
    result.gates.push_back(std::move(ge));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

int gate_check_status(const EvaluationResult& result) {
  if (result.gates.empty()) return kCheckInconclusive;
  bool inconclusive = false;
  for (const auto& g : result.gates) {
    if (g.result.verdict == stats::Verdict::fail) return kCheckFail;
    inconclusive = inconclusive || g.result.verdict != stats::Verdict::pass;
  }
  return inconclusive ? kCheckInconclusive : kCheckPass;
}

std::string gate_summary(const EvaluationResult& result) {
  std::ostringstream out;
  for (auto& g : result.gates) {
    out << g.spec.gate.name << ": " << g.spec.gate.statistic;
    if (!g.spec.predictor.empty()) out << "(" << g.spec.predictor << ")";
    out << " " << stats::to_string(g.spec.gate.direction) << " " << num(g.spec.gate.threshold) << ": "
        << stats::to_string(g.result.verdict);
    if (g.has_interval) out << ", " << g.result.interval.describe();
    if (g.result.verdict == stats::Verdict::inconclusive && !g.result.reasons.empty())
      out << " (" << g.result.reasons.front() << (g.result.reasons.size() > 1 ? "; ..." : "") << ")";
    out << "\n";
  }
  return out.str();
}

namespace {

std::string predictor_label(const PredictorEvaluation& p) {
  if (p.privileged) return "privileged";
  if (p.post_outcome) return "post-outcome";
  return "forecast";
}

struct Row {
  std::string predictor, label, statistic;
  double estimate = NAN;
  const stats::Interval* ci = nullptr;
  std::string note;
};

std::vector<Row> statistic_rows(const EvaluationResult& r) {
  std::vector<Row> rows;
  auto outcome_stat = [&](const std::string& s, double est) {
    Row row{"(outcome)", "outcome", s, est, nullptr, {}};
    if (auto it = r.outcome_intervals.find(s); it != r.outcome_intervals.end()) row.ci = &it->second;
    if (auto it = r.outcome_undefined.find(s); it != r.outcome_undefined.end()) row.note = it->second;
    rows.push_back(row);
  };
  const auto& d = r.outcome_decomposition;
  outcome_stat("share_time", d ? d->share_time : NAN);
  outcome_stat("share_cell", d ? d->share_cell : NAN);
  outcome_stat("share_residual", d ? d->share_residual : NAN);
  for (auto& p : r.predictors) {
    auto add = [&](const std::string& s, double est, std::string note = {}) {
      Row row{p.name, predictor_label(p), s, est, nullptr, {}};
      if (!p.identical_to.empty()) note = "same table as " + p.identical_to + (note.empty() ? "" : "; " + note);
      if (auto it = p.intervals.find(s); it != p.intervals.end()) row.ci = &it->second;
      if (auto it = p.undefined.find(s); it != p.undefined.end()) note += (note.empty() ? "" : "; ") + it->second;
      row.note = note;
      rows.push_back(row);
    };
    if (!p.unavailable.empty()) {
      rows.push_back({p.name, predictor_label(p), "(all)", NAN, nullptr, "not scored: " + p.unavailable});
      continue;
    }
    add("bias", p.metrics.bias);
    add("mae", p.metrics.mae);
    add("rmse_macro", p.metrics.rmse_macro);
    add("rmse_pooled", p.metrics.rmse_pooled);
    for (auto& b : r.analysis.baselines) {
      if (b == p.name) continue;
      auto it = p.skill.find(b);
      add(baseline_key(b), it == p.skill.end() ? NAN : it->second);
    }
    const auto& dir = p.directional;
    if (!p.directional_note.empty()) {
      // The true reason, instead of the bootstrap's "no directional cell" on every resample.
      for (auto* s : {"sign_agreement_rate", "binomial_p_value", "anomaly_correlation", "cell_anomaly_correlation"}) {
        double est = std::string(s) == "binomial_p_value" ? dir.binomial_p_value : NAN;
        rows.push_back({p.name, predictor_label(p), s, est, nullptr, p.name + ": " + p.directional_note});
      }
    } else {
      add("sign_agreement_rate", dir.sign_agreement_rate.value_or(NAN),
          "k=" + std::to_string(dir.n_sign_agree) + " of n=" + std::to_string(dir.n_directional) +
              " directional cells");
      rows.push_back({p.name, predictor_label(p), "binomial_p_value", dir.binomial_p_value, nullptr,
                      dir.significant ? "significant at alpha=" + num(dir.alpha) : "not significant"});
      add("anomaly_correlation", dir.anomaly_correlation.value_or(NAN));
      add("cell_anomaly_correlation", dir.cell_anomaly_correlation.value_or(NAN));
    }
    const auto& e = p.error_decomposition;
    add("error_share_time", e ? e->share_time : NAN);
    add("error_share_cell", e ? e->share_cell : NAN);
    add("error_share_residual", e ? e->share_residual : NAN);
  }
  return rows;
}

// Which projection `source` (and matched-reference) read per cell: the one of the target's write-back policy.
std::string projection_summary(const EvaluationResult& r) {
  if (r.source_method == "analytic-grid") {
    return "analytic grid for every cell ([source] method = \"analytic-grid\": the reference's joint (|w|, |u|) "
           "histogram at the target's format and learning-rate scale, round-to-nearest; docs/forecasting.md)";
  }
  std::map<std::string, int> counts;
  for (auto& p : r.projections) ++counts[p];
  std::string out;
  for (auto& [name, n] : counts)
    out += (out.empty() ? "" : ", ") + name + " for " + std::to_string(n) + (n == 1 ? " cell" : " cells");
  out +=
      " (each target scored against the projection of its own write-back policy: nearest = exact projected "
      "events, stochastic / deadzone-sr = expected erased fraction)";
  if (!r.projection_notes.empty()) out += "; " + join(r.projection_notes, "; ");
  return out;
}

std::string crossing_settings(const EvaluationResult& r) {
  const auto& o = r.crossing_options;
  return "threshold " + num(o.threshold) + ", burn-in " + std::to_string(o.burn_in.value_or(0)) + " (" + r.burn_in_how +
         "), tolerance " + num(o.tolerance) + ", minimum group size " + std::to_string(o.min_group_size) +
         " coordinates";
}

std::string ci_text(const stats::Interval* ci) {
  if (!ci) return "";
  return "[" + shown(ci->lower) + ", " + shown(ci->upper) + "]";
}

void write_text(const fs::path& path, const std::string& text) {
  util::write_atomic(path, text, /*durable=*/false);
}

std::string fresh_name(const fs::path& parent, const std::string& hash) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  std::string base = std::string(stamp) + "-" + hash.substr(0, 12);
  std::string name = base;
  for (int k = 2; fs::exists(parent / name); ++k) name = base + "-" + std::to_string(k);
  return name;
}

}  // namespace

fs::path write_evaluation_report(EvaluationResult& r, const EvaluateOptions& options) {
  fs::path final_dir;
  if (!options.out.empty()) {
    final_dir = options.out;
    if (fs::exists(final_dir))
      throw StoreError(final_dir.string() + " exists: an evaluation never overwrites an earlier one");
  } else {
    fs::create_directories(r.sweep_dir / "evaluations");
    final_dir = r.sweep_dir / "evaluations" / fresh_name(r.sweep_dir / "evaluations", r.analysis_sha256);
  }
  fs::path parent = final_dir.parent_path().empty() ? fs::path(".") : final_dir.parent_path();
  fs::create_directories(parent);
  const fs::path tmp = parent / ("." + final_dir.filename().string() + ".tmp." + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp / "figures");
  try {
    const auto rows = statistic_rows(r);
    const auto& rows_all = rows;
    // skill_by_step.csv, breakdown.csv and (under a drop policy) dropped.csv.
    {
      std::ostringstream csv;
      csv << "predictor,step,rmse_step,ci_lower,ci_upper\n";
      for (auto& p : r.predictors)
        for (auto& s : p.by_step)
          csv << p.name << "," << s.step << "," << num(s.rmse, 17) << "," << num(s.lower, 17) << "," << num(s.upper, 17)
              << "\n";
      write_text(tmp / "skill_by_step.csv", csv.str());
    }
    {
      std::ostringstream csv;
      csv << "factor,level,predictor,cells,rmse_macro";
      for (auto& b : r.analysis.baselines) csv << "," << baseline_key(b);
      csv << "\n";
      for (auto& b : r.breakdown) {
        csv << csv_field(b.factor) << "," << csv_field(b.level) << "," << b.predictor << "," << b.cells << ","
            << num(b.rmse_macro, 17);
        for (auto& base : r.analysis.baselines) {
          auto it = b.skill.find(base);
          csv << "," << (it == b.skill.end() ? std::string() : num(it->second, 17));
        }
        csv << "\n";
      }
      write_text(tmp / "breakdown.csv", csv.str());
    }
    if (r.analysis.missing != stats::MissingPolicy::error) {
      std::ostringstream csv;
      csv << "table,kind,label\n";
      for (auto& d : r.dropped) csv << csv_field(d[0]) << "," << d[1] << "," << csv_field(d[2]) << "\n";
      write_text(tmp / "dropped.csv", csv.str());
    }
    const auto& boot = r.analysis.bootstrap;

    // statistics.csv: one row per (predictor, statistic), with its definition and interval provenance.
    {
      std::ostringstream csv;
      csv << "predictor,predictor_label,statistic,definition,estimate,ci_lower,ci_upper,confidence,method,"
             "resampling,resamples,seed,n_units,note\n";
      for (auto& row : rows) {
        csv << csv_field(row.predictor) << "," << row.label << "," << row.statistic << ","
            << csv_field(definition(row.statistic)) << "," << num(row.estimate, 17) << ",";
        if (row.ci) {
          csv << num(row.ci->lower, 17) << "," << num(row.ci->upper, 17) << "," << num(row.ci->confidence) << ","
              << stats::to_string(row.ci->method) << "," << stats::to_string(row.ci->resampling) << ","
              << row.ci->resamples << "," << row.ci->seed << "," << row.ci->n_units;
        } else {
          csv << ",,,,,,,";
        }
        csv << "," << csv_field(row.note) << "\n";
      }
      write_text(tmp / "statistics.csv", csv.str());
    }
    // cells.csv: per predictor and cell.
    {
      std::ostringstream csv;
      csv << "predictor,predictor_label,cell,run,group,format,projection,bias_cell,mae_cell,rmse_cell,mse_cell,"
             "outcome_cell_anomaly,predictor_cell_anomaly\n";
      for (auto& p : r.predictors) {
        if (!p.unavailable.empty()) continue;
        std::map<std::string, Eigen::Index> dir_index;
        for (std::size_t i = 0; i < p.directional.cells.size(); ++i)
          dir_index[p.directional.cells[i]] = Eigen::Index(i);
        for (auto& m : p.metrics.cells) {
          auto k = std::find(r.cells.begin(), r.cells.end(), m.cell) - r.cells.begin();
          csv << p.name << "," << predictor_label(p) << "," << csv_field(m.cell) << "," << csv_field(r.runs[k]) << ","
              << r.groups[k] << "," << r.formats[k] << "," << r.projections[k] << "," << num(m.bias_cell, 17) << ","
              << num(m.mae_cell, 17) << "," << num(m.rmse_cell, 17) << "," << num(m.mse_cell, 17) << ",";
          if (auto it = dir_index.find(m.cell); it != dir_index.end()) {
            csv << num(p.directional.outcome_cell_anomaly[it->second], 17) << ","
                << num(p.directional.predictor_cell_anomaly[it->second], 17);
          } else {
            csv << ",";
          }
          csv << "\n";
        }
      }
      write_text(tmp / "cells.csv", csv.str());
    }
    // gates.csv
    {
      std::ostringstream csv;
      csv << "gate,statistic,predictor,comparator,threshold,verdict,estimate,ci_lower,ci_upper,confidence,method,"
             "resampling,resamples,seed,n_units,standing,reasons\n";
      for (auto& g : r.gates) {
        csv << csv_field(g.spec.gate.name) << "," << g.spec.gate.statistic << "," << g.spec.predictor << ","
            << stats::to_string(g.spec.gate.direction) << "," << num(g.spec.gate.threshold, 17) << ","
            << stats::to_string(g.result.verdict) << ",";
        if (g.has_interval) {
          auto& ci = g.result.interval;
          csv << num(ci.estimate, 17) << "," << num(ci.lower, 17) << "," << num(ci.upper, 17) << ","
              << num(ci.confidence) << "," << stats::to_string(ci.method) << "," << stats::to_string(ci.resampling)
              << "," << ci.resamples << "," << ci.seed << "," << ci.n_units;
        } else {
          csv << ",,,,,,,,";
        }
        csv << "," << csv_field(r.standing) << "," << csv_field(join(g.result.reasons, "; ")) << "\n";
      }
      write_text(tmp / "gates.csv", csv.str());
    }
    // cohort.csv: every target cell, its identity, whether the analysis requires it, the deviation naming it.
    {
      std::ostringstream csv;
      csv << "cell,canonical,reason,in_cohort,deviation,enters_verdict\n";
      for (auto& c : r.cohort)
        csv << csv_field(c.cell) << "," << (c.canonical ? "true" : "false") << "," << csv_field(c.reason) << ","
            << (c.in_cohort ? "true" : "false") << "," << csv_field(c.deviation) << ","
            << (c.can_enter ? "true" : "false") << "\n";
      write_text(tmp / "cohort.csv", csv.str());
    }
    // decomposition.csv
    {
      std::ostringstream csv;
      csv << "table,ss_total,ss_time,ss_cell,ss_residual,share_time,share_cell,share_residual\n";
      auto line = [&](const std::string& name, const std::optional<stats::Decomposition>& d) {
        if (!d) return;
        csv << csv_field(name) << "," << num(d->ss_total, 17) << "," << num(d->ss_time, 17) << ","
            << num(d->ss_cell, 17) << "," << num(d->ss_residual, 17) << "," << num(d->share_time, 17) << ","
            << num(d->share_cell, 17) << "," << num(d->share_residual, 17) << "\n";
      };
      line("outcome", r.outcome_decomposition);
      for (auto& p : r.predictors) line("error:" + p.name, p.error_decomposition);
      write_text(tmp / "decomposition.csv", csv.str());
    }
    // series.csv: the aligned tables, long format.
    {
      std::ostringstream csv;
      csv << "cell,step,outcome";
      for (auto& t : r.tables) csv << "," << t.name;
      csv << "\n";
      for (Eigen::Index i = 0; i < r.outcome.rows(); ++i) {
        for (Eigen::Index k = 0; k < r.outcome.cols(); ++k) {
          csv << csv_field(r.cells[std::size_t(i)]) << "," << r.steps[std::size_t(k)] << ","
              << num(r.outcome.values(i, k), 17);
          for (auto& t : r.tables) csv << "," << num(t.table.values(i, k), 17);
          csv << "\n";
        }
      }
      write_text(tmp / "series.csv", csv.str());
    }
    // crossings.csv: per predictor and cell.
    {
      std::ostringstream csv;
      csv << "predictor,cell,category,measured_status,predicted_status,measured_crossing,predicted_crossing,"
             "relative_error,within_tolerance\n";
      for (auto& p : r.predictors) {
        for (auto& c : p.crossings) {
          csv << p.name << "," << csv_field(c.cell) << "," << forecast::to_string(c.category) << ","
              << forecast::to_string(c.measured.status) << "," << forecast::to_string(c.predicted.status) << ","
              << num(c.measured.status == forecast::CrossingStatus::crossed ? c.measured.time : NAN, 17) << ","
              << num(c.predicted.status == forecast::CrossingStatus::crossed ? c.predicted.time : NAN, 17) << ","
              << num(c.relative_error, 17) << "," << (c.within_tolerance ? "true" : "false") << "\n";
        }
      }
      write_text(tmp / "crossings.csv", csv.str());
    }
    write_text(tmp / "analysis.toml", r.effective_analysis);
    if (!r.analysis.text.empty()) write_text(tmp / "analysis_given.toml", r.analysis.text);

    // Figures.
    std::vector<std::pair<std::string, std::string>> figures;  // (stem, caption)
    // Predictors whose tables are identical share one legend entry ("source = matched-reference"); the scored
    // primary predictor (the first forecast one) is drawn last, on top, so that no series hides it.
    const PredictorEvaluation* primary = nullptr;
    for (auto& p : r.predictors)
      if (p.unavailable.empty() && !p.post_outcome && !primary) primary = &p;
    struct Drawn {
      std::string title;
      const forecast::PredictorTable* table;
      std::string name;  // the first predictor of the group
      bool primary;
    };
    std::vector<Drawn> drawn;
    for (auto& t : r.tables) {
      bool merged = false;
      for (auto& d : drawn) {
        const auto& a = d.table->table.values;
        const auto& b = t.table.values;
        if (a.rows() == b.rows() && a.cols() == b.cols() &&
            ((a.array() == b.array()) || (a.array().isNaN() && b.array().isNaN())).all()) {
          d.title += " = " + t.name + (t.privileged ? " (privileged)" : "");
          d.primary = d.primary || (primary && t.name == primary->name);
          merged = true;
          break;
        }
      }
      if (!merged)
        drawn.push_back({t.name + (t.privileged     ? " (privileged)"
                                   : t.post_outcome ? " (post-outcome)"
                                                    : ""),
                         &t, t.name, primary && t.name == primary->name});
    }
    std::stable_partition(drawn.begin(), drawn.end(), [](const Drawn& d) { return !d.primary; });
    auto predictor_colour = [](const std::string& name) {
      static const std::map<std::string, std::string> c = {{"source", "#d62728"},
                                                           {"matched-reference", "#9467bd"},
                                                           {"analytic-grid", "#ff7f0e"},
                                                           {"template", "#2ca02c"},
                                                           {"common-time", "#7f7f7f"}};
      auto it = c.find(name);
      return it == c.end() ? std::string("#17becf") : it->second;
    };
    if (options.figures) {
      // 1. Decomposition shares with their bootstrap intervals as error bars.
      {
        report::Figure fig;
        fig.title = std::string("Common-time decomposition y = mu + a_t + b_c + e: shares of SS_total");
        fig.ylabel = std::string("share of SS_total");
        fig.ymin = 0;
        fig.ymax = 1.05;
        struct Bar {
          std::string label;
          const stats::Decomposition* d;
          const std::map<std::string, stats::Interval>* ci;
          std::string prefix;
        };
        std::vector<Bar> bars;
        if (r.outcome_decomposition) bars.push_back({"outcome", &*r.outcome_decomposition, &r.outcome_intervals, ""});
        for (auto& p : r.predictors)
          if (p.error_decomposition)
            bars.push_back({p.name + " error", &*p.error_decomposition, &p.intervals, "error_"});
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
            if (s > 0) errors.title = "";  // one legend entry for the error bars
            fig.series.push_back(errors);
          }
        }
        std::string tics = "set xtics rotate by -25 (";
        for (std::size_t b = 0; b < bars.size(); ++b)
          tics += (b ? ", " : "") + std::string("'") + bars[b].label + "' " + std::to_string(b);
        tics += ")";
        fig.extra = {"set style fill solid 0.8 border -1", "set boxwidth 0.25", tics,
                     "set xrange [-0.6:" + std::to_string(double(bars.size()) - 0.4) + "]"};
        if (!bars.empty()) {
          report::render(fig, tmp / "figures", "decomposition");
          figures.push_back({"decomposition",
                             "Shares SS_time, SS_cell, SS_residual of SS_total, for the outcome and for "
                             "each predictor's forecast error (descriptive), with their " +
                                 num(100 * boot.confidence) + "% " + std::string(stats::to_string(boot.method)) +
                                 " bootstrap intervals as error bars (absent where undefined)."});
        }
      }
      // 2. Outcome and every predictor over time, most and least predictable cell by rmse_cell of the primary.
      if (primary && !primary->metrics.cells.empty()) {
        auto cmp = [](const stats::CellMetrics& a, const stats::CellMetrics& b) { return a.rmse_cell < b.rmse_cell; };
        auto best = std::min_element(primary->metrics.cells.begin(), primary->metrics.cells.end(), cmp);
        auto worst = std::max_element(primary->metrics.cells.begin(), primary->metrics.cells.end(), cmp);
        for (auto [which, m] : {std::pair<std::string, const stats::CellMetrics*>{"most", &*best},
                                std::pair<std::string, const stats::CellMetrics*>{"least", &*worst}}) {
          auto i = std::find(r.cells.begin(), r.cells.end(), m->cell) - r.cells.begin();
          report::Figure fig;
          fig.title = std::string(which + " predictable cell (rmse_cell of " + primary->name + " = " +
                                  shown(m->rmse_cell) + "): " + m->cell);
          fig.xlabel = "step";
          fig.ylabel = "erased fraction";
          fig.width = 1000;
          std::vector<double> x(r.steps.begin(), r.steps.end());
          report::Series out{"outcome (measured)", x, {}, "lines lw 3 lc rgb '#000000'"};
          for (Eigen::Index k = 0; k < r.outcome.cols(); ++k) out.y.push_back(r.outcome.values(i, k));
          fig.series.push_back(out);
          int dash = 2, point = 4;
          for (auto& d : drawn) {
            report::Series s{d.title, x, {}, {}};
            s.style = d.primary ? "linespoints lw 2 pt 7 ps 0.6 lc rgb '" + predictor_colour(d.name) + "'"
                                : "linespoints lw 1.5 dt " + std::to_string(dash++) + " pt " + std::to_string(point++) +
                                      " ps 0.8 pi 4 lc rgb '" + predictor_colour(d.name) + "'";
            for (Eigen::Index k = 0; k < d.table->table.cols(); ++k) s.y.push_back(d.table->table.values(i, k));
            fig.series.push_back(s);
          }
          fig.extra = {"set key bottom right"};
          report::render(fig, tmp / "figures", which + "_predictable");
          figures.push_back(
              {which + "_predictable", "Outcome and every predictor over time, " + which +
                                           " predictable cell by rmse_cell of " + primary->name +
                                           " (drawn on top, solid); predictors with identical series share one "
                                           "legend entry (\"a = b\")."});
        }
      }
      // 3. Per-cell mean anomalies, predicted vs measured.
      {
        report::Figure fig;
        fig.title = "Directional specificity: per-cell mean anomalies (common time removed)";
        fig.xlabel = std::string("measured mean anomaly m_Y(c)");
        fig.ylabel = std::string("predicted mean anomaly m_P(c)");
        double lo = 0, hi = 0;
        int point = 5;
        for (auto& d : drawn) {
          const PredictorEvaluation* p = nullptr;
          for (auto& q : r.predictors)
            if (q.name == d.name) p = &q;
          if (!p || !p->unavailable.empty() || p->directional.cells.empty()) continue;
          report::Series s;
          s.title = d.title + (p->directional_note.empty() ? "" : " (anomaly field exactly zero)");
          s.style = d.primary
                        ? "points pt 7 ps 0.9 lc rgb '" + predictor_colour(d.name) + "'"
                        : "points pt " + std::to_string(point++) + " ps 1.1 lc rgb '" + predictor_colour(d.name) + "'";
          for (Eigen::Index c = 0; c < p->directional.outcome_cell_anomaly.size(); ++c) {
            s.x.push_back(p->directional.outcome_cell_anomaly[c]);
            s.y.push_back(p->directional.predictor_cell_anomaly[c]);
            lo = std::min({lo, s.x.back(), s.y.back()});
            hi = std::max({hi, s.x.back(), s.y.back()});
          }
          fig.series.push_back(s);
        }
        if (!fig.series.empty()) {
          fig.series.insert(fig.series.begin(), {"y = x", {lo, hi}, {lo, hi}, "lines dt 2 lc rgb '#888888'"});
          fig.extra = {"set xzeroaxis", "set yzeroaxis"};
          report::render(fig, tmp / "figures", "anomaly_scatter");
          figures.push_back({"anomaly_scatter",
                             "Per-cell mean anomalies, predicted vs measured: points in the first "
                             "and third quadrants have the right sign. The scored predictor is drawn "
                             "last (filled circles); identical predictors share one legend entry."});
        }
      }
      // 4. RMSE by recorded step, one curve per predictor with its interval band.
      {
        report::Figure fig;
        fig.title =
            "RMSE over cells at each recorded step, with " + num(100 * boot.confidence) + "% percentile intervals";
        fig.xlabel = "step + 1";
        fig.ylabel = "RMSE of the erased fraction";
        fig.logx = true;
        fig.ymin = 0;
        for (auto& d : drawn) {
          const PredictorEvaluation* p = nullptr;
          for (auto& q : r.predictors)
            if (q.name == d.name) p = &q;
          if (!p || p->by_step.empty()) continue;
          report::Series band{
              "", {}, {}, "filledcurves fs transparent solid 0.2 noborder lc rgb '" + predictor_colour(d.name) + "'"};
          report::Series line{d.title, {}, {}, "lines lw 2 lc rgb '" + predictor_colour(d.name) + "'"};
          for (auto& s : p->by_step) {
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
          if (!band.x.empty()) fig.series.push_back(band);
          fig.series.push_back(line);
        }
        if (!fig.series.empty()) {
          report::render(fig, tmp / "figures", "skill_by_step");
          figures.push_back({"skill_by_step",
                             "RMSE over cells at each recorded step, one curve per predictor, shaded: "
                             "its percentile bootstrap interval over the resampling units "
                             "(skill_by_step.csv)."});
        }
      }
      // 5. rmse_macro by format, one line per predictor.
      {
        std::vector<std::string> levels;
        for (auto& b : r.breakdown)
          if (b.factor == "format" && std::find(levels.begin(), levels.end(), b.level) == levels.end())
            levels.push_back(b.level);
        if (!levels.empty()) {
          report::Figure fig;
          fig.title = "rmse_macro by target format";
          fig.ylabel = "rmse_macro";
          fig.ymin = 0;
          int point = 5;
          for (auto& d : drawn) {
            report::Series s{d.title,
                             {},
                             {},
                             "linespoints lw 2 pt " + std::to_string(d.primary ? 7 : point++) + " ps 1.2 lc rgb '" +
                                 predictor_colour(d.name) + "'"};
            for (auto& b : r.breakdown) {
              if (b.factor != "format" || b.predictor != d.name) continue;
              s.x.push_back(double(std::find(levels.begin(), levels.end(), b.level) - levels.begin()));
              s.y.push_back(b.rmse_macro);
            }
            if (!s.x.empty()) fig.series.push_back(s);
          }
          std::string tics = "set xtics (";
          for (std::size_t k = 0; k < levels.size(); ++k)
            tics += (k ? ", " : "") + std::string("'") + levels[k] + "' " + std::to_string(k);
          fig.extra = {tics + ")", "set xrange [-0.5:" + std::to_string(double(levels.size()) - 0.5) + "]"};
          report::render(fig, tmp / "figures", "skill_by_format");
          figures.push_back({"skill_by_format",
                             "rmse_macro of each predictor per target format (breakdown.csv has every "
                             "factor of the grid)."});
        }
      }
      // The cohort: which target cells are canonical, required, named by a deviation, and enter the verdict.
      if (!r.cohort.empty() && (r.registration_sha256 || !r.cohort_verdict.empty())) {
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
        report::render(fig, tmp / "figures", "cohort");
        figures.push_back({"cohort",
                           "Every target cell of the sweep: canonical or not, required by this analysis "
                           "(its cohort), named by a deviation, entering the verdict (cohort.csv)."});
      }
    }

    // The report: one document rendered as Markdown and HTML.
    const fs::path crossing_report = fs::absolute(r.sweep_dir / "report" / "report.html");
    const std::string crossing_link = crossing_report.lexically_relative(fs::absolute(final_dir)).generic_string();
    std::string cells_steps = std::to_string(r.cells.size()) + " x " + std::to_string(r.steps.size());
    if (r.analysis.missing != stats::MissingPolicy::error) {
      cells_steps += " before " + std::string(stats::to_string(r.analysis.missing)) + "; the outcome kept " +
                     std::to_string(r.kept_cells) + " x " + std::to_string(r.kept_steps) + " (" +
                     std::to_string(r.dropped.size()) + " drops over all tables, listed in dropped.csv)";
    }
    std::vector<std::vector<std::string>> facts = {
        {"sweep", r.sweep_name + " (" + r.sweep_dir.string() + ")"},
        {"analysis",
         r.analysis.name + (r.analysis.path.empty() ? " (built in)" : " (" + r.analysis.path.string() + ")")},
        {"analysis SHA-256", r.analysis_sha256 + " (of the complete effective analysis, analysis.toml)"},
        {"standing", r.standing + (r.standing_reasons.empty() ? "" : ": " + join(r.standing_reasons, "; "))},
        {"registration", r.registration_sha256 ? *r.registration_sha256 : "none"},
        {"outcome", r.analysis.outcome + " y(c,t) = erased / nonzero, per target run and parameter group"},
        {"cells x steps", cells_steps},
        {"source", r.source_reference},
        {"source projection", projection_summary(r)},
        {"template", "class " + join(r.analysis.template_class, "/") + ", history: " + r.template_history},
        {"bootstrap",
         std::to_string(boot.resamples) + " resamples, " + std::string(stats::to_string(boot.method)) + ", seed " +
             std::to_string(boot.seed) + ", confidence " + num(boot.confidence) + ", unit " +
             (r.analysis.unit == BootstrapUnit::run ? "run" : "cell") + "; n = " + std::to_string(r.resampling_units) +
             (r.analysis.unit == BootstrapUnit::run ? " target runs (training runs, not layer cells)" : " cells") +
             (r.resampling_units < 10 ? ": with so few units an interval may be wide, and a gate whose "
                                        "interval straddles its threshold is inconclusive, never a pass"
                                      : "")},
        {"crossing settings", crossing_settings(r)},
        {"missing values", std::string(stats::to_string(r.analysis.missing))},
        {"target runs left out", r.missing_targets.empty() ? "none" : join(r.missing_targets, "; ")},
        {"computed in", num(r.seconds, 3) + " s"}};
    const std::vector<std::pair<std::string, std::string>> tables_links = {
        {"statistics.csv", "statistics.csv"},
        {"cells.csv", "cells.csv"},
        {"gates.csv", "gates.csv"},
        {"cohort.csv", "cohort.csv"},
        {"decomposition.csv", "decomposition.csv"},
        {"crossings.csv", "crossings.csv"},
        {"series.csv", "series.csv"},
        {"skill_by_step.csv", "skill_by_step.csv"},
        {"breakdown.csv", "breakdown.csv"},
        {"analysis.toml (effective)", "analysis.toml"},
        {"crossing report of the sweep", crossing_link}};

    report::Document doc("Skill report: " + r.sweep_name);
    doc.heading("Evaluation");
    doc.table({"fact", "value"}, facts);
    doc.paragraph(
        "Labels: forecast predictors are scored as forecasts; privileged (matched-reference) needs one fp32 "
        "run per target and is a comparison, never a forecast; post-outcome (common-time) is built from the "
        "outcomes being scored and is descriptive only.");
    doc.links("Tables:", tables_links);

    doc.heading("Gates");
    {
      std::vector<std::vector<std::string>> rows;
      for (auto& g : r.gates) {
        rows.push_back(
            {g.spec.gate.name, g.spec.gate.statistic, g.spec.predictor.empty() ? "(outcome)" : g.spec.predictor,
             std::string(stats::to_string(g.spec.gate.direction)) + " " + num(g.spec.gate.threshold),
             std::string(stats::to_string(g.result.verdict)), g.has_interval ? shown(g.result.interval.estimate) : "—",
             g.has_interval ? g.result.interval.describe() : "—", join(g.result.reasons, "; ")});
      }
      if (rows.empty()) rows.push_back({"(no gates declared)", "", "", "", "", "", "", ""});
      doc.table({"gate", "statistic", "predictor", "rule", "verdict", "estimate", "CI", "reasons"}, rows);
    }

    doc.heading("At a glance");
    {
      // Is accuracy shared time or source-specific transfer? rmse_macro of every predictor side by side, skill, the
      // common-time share of the outcome and the directional result of each forecast predictor.
      auto stat_cell = [&](const PredictorEvaluation& p, const std::string& s, double est) {
        if (!p.unavailable.empty()) return std::string("not scored");
        std::string out = shown(est);
        if (auto it = p.intervals.find(s); it != p.intervals.end()) out += " " + ci_text(&it->second);
        return out;
      };
      std::vector<std::vector<std::string>> rows;
      for (auto& p : r.predictors) {
        std::string skill;
        for (auto& b : r.analysis.baselines) {
          if (b == p.name || !p.unavailable.empty()) continue;
          auto it = p.skill.find(b);
          skill += (skill.empty() ? "" : "; ") + b + ": " +
                   stat_cell(p, baseline_key(b), it == p.skill.end() ? NAN : it->second);
        }
        std::string directional = "—";
        if (p.unavailable.empty()) {
          const auto& d = p.directional;
          directional = "anomaly correlation " +
                        stat_cell(p, "anomaly_correlation", d.anomaly_correlation.value_or(NAN)) + "; signs " +
                        std::to_string(d.n_sign_agree) + "/" + std::to_string(d.n_directional) +
                        " (binomial p = " + num(d.binomial_p_value, 3) + ")";
        }
        rows.push_back({p.name, predictor_label(p), stat_cell(p, "rmse_macro", p.metrics.rmse_macro),
                        skill.empty() ? "—" : skill, directional});
      }
      doc.table({"predictor", "label", "rmse_macro", "skill", "directional specificity"}, rows);
      const auto& d = r.outcome_decomposition;
      std::string share = d ? shown(d->share_time) : std::string("undefined");
      if (auto it = r.outcome_intervals.find("share_time"); it != r.outcome_intervals.end())
        share += " " + ci_text(&it->second);
      doc.paragraph("Common time: share_time of the outcome = " + share +
                    " (SS_time / SS_total of y = mu + a_t + b_c + e). A large share with a good rmse_macro and skill "
                    "but a directional result near chance means the accuracy comes from the shared time course, "
                    "not from source-specific transfer. Bootstrap units: n = " +
                    std::to_string(r.resampling_units) + ".");
    }

    if (r.registration_sha256 || !r.cohort_verdict.empty()) {
      doc.heading("Cohort");
      for (auto st : r.cohort_statements) {
        st[0] = char(std::toupper(static_cast<unsigned char>(st[0])));
        doc.paragraph(st + ".");
      }
      if (!r.cohort_verdict.empty()) doc.paragraph("Verdict (" + r.standing + "): " + r.cohort_verdict + ".");
      std::vector<std::vector<std::string>> rows;
      for (auto& c : r.cohort)
        rows.push_back({c.cell, c.canonical ? "canonical" : "not canonical", c.canonical ? "—" : c.reason,
                        c.in_cohort ? "yes" : "no", c.deviation.empty() ? "—" : c.deviation,
                        c.can_enter ? "enters" : "left out"});
      doc.table({"cell", "identity", "why not canonical", "required (cohort)", "deviation", "in the verdict"}, rows);
    }

    // Notes are footnoted once each, so a reason shared by many rows is written once.
    std::vector<std::string> notes;
    auto note_ref = [&](const std::string& text) -> std::string {
      if (text.empty()) return "";
      auto it = std::find(notes.begin(), notes.end(), text);
      if (it == notes.end()) {
        notes.push_back(text);
        it = notes.end() - 1;
      }
      return "[" + std::to_string(it - notes.begin() + 1) + "]";
    };
    doc.heading("Summary");
    {
      std::vector<std::string> stats_cols = {"rmse_macro", "rmse_pooled", "bias", "mae"};
      for (auto& b : r.analysis.baselines) stats_cols.push_back(baseline_key(b));
      for (auto* s : {"sign_agreement_rate", "anomaly_correlation"}) stats_cols.push_back(s);
      std::vector<std::string> header = {"predictor", "label"};
      for (auto& s : stats_cols) header.push_back(s);
      std::vector<std::vector<std::string>> rows;
      for (auto& p : r.predictors) {
        std::vector<std::string> row = {p.name, predictor_label(p)};
        for (auto& s : stats_cols) {
          const Row* found = nullptr;
          for (auto& x : rows_all)
            if (x.predictor == p.name && x.statistic == s) found = &x;
          if (!found) {
            row.push_back("—");
            continue;
          }
          std::string cell = shown(found->estimate);
          if (found->ci) cell += " " + ci_text(found->ci);
          if (!found->note.empty() && !found->ci) cell += " " + note_ref(found->note);
          row.push_back(cell);
        }
        rows.push_back(row);
      }
      doc.paragraph("Each entry: estimate [" + num(100 * boot.confidence) + "% " +
                    std::string(stats::to_string(boot.method)) +
                    " interval]; a bracketed number refers to the notes below the statistics table.");
      doc.table(header, rows);
    }

    doc.heading("Statistics");
    {
      std::vector<std::vector<std::string>> rows;
      for (auto& row : rows_all)
        rows.push_back({row.predictor, row.label, row.statistic, shown(row.estimate), ci_text(row.ci),
                        definition(row.statistic), note_ref(row.note)});
      doc.table({"predictor", "label", "statistic", "estimate", "CI", "definition", "note"}, rows);
      doc.paragraph("Intervals: " + num(100 * boot.confidence) + "% " + std::string(stats::to_string(boot.method)) +
                    ", " + std::to_string(boot.resamples) + " resamples, seed " + std::to_string(boot.seed) +
                    ", resampling units = " + (r.analysis.unit == BootstrapUnit::run ? "target runs" : "cells") + ".");
      std::string text;
      for (std::size_t k = 0; k < notes.size(); ++k)
        text += (k ? " " : "") + std::string("[") + std::to_string(k + 1) + "] " + notes[k];
      if (!notes.empty()) doc.paragraph("Notes: " + text);
    }

    doc.heading("Skill by step and by grid factor");
    {
      std::vector<std::string> header = {"factor", "level", "predictor", "cells", "rmse_macro"};
      for (auto& b : r.analysis.baselines) header.push_back(baseline_key(b));
      std::vector<std::vector<std::string>> rows;
      for (auto& b : r.breakdown) {
        std::vector<std::string> row = {b.factor, b.level, b.predictor, std::to_string(b.cells), shown(b.rmse_macro)};
        for (auto& base : r.analysis.baselines) {
          auto it = b.skill.find(base);
          row.push_back(it == b.skill.end() ? "—" : shown(it->second));
        }
        rows.push_back(row);
      }
      doc.paragraph(
          "Point estimates over the cells of each level (no intervals); skill = 1 - sum MSE_P / sum MSE_B over "
          "those cells. The curve per recorded step is in the figure skill_by_step and skill_by_step.csv.");
      if (!rows.empty()) doc.table(header, rows);
    }

    doc.heading("Crossings");
    doc.paragraph("Settings: " + crossing_settings(r) + ".");
    {
      std::vector<std::vector<std::string>> rows;
      for (auto& p : r.predictors) {
        if (!p.crossing) continue;
        rows.push_back({p.name, predictor_label(p), p.crossing->to_string()});
      }
      doc.table({"predictor", "label", "crossings"}, rows);
      if (primary && primary->crossing) {
        doc.subheading("By measured crossing-time decade (" + primary->name + ")");
        std::vector<std::vector<std::string>> drows;
        for (auto& d : primary->crossing->by_decade)
          drows.push_back({"[" + num(d.lo) + ", " + num(d.hi) + ")", std::to_string(d.measured_crossing),
                           std::to_string(d.both_cross),
                           std::to_string(d.within_tolerance) + "/" + std::to_string(d.both_cross),
                           shown(d.median_relative_error)});
        if (!drows.empty())
          doc.table(
              {"measured crossing step", "measured crossings", "both cross", "within tolerance", "median rel. error"},
              drows);
      }
    }

    if (!figures.empty()) {
      doc.heading("Figures");
      for (auto& [stem, caption] : figures) doc.figure(stem, caption);
    }
    write_text(tmp / "report.md", doc.markdown());
    write_text(tmp / "report.html", doc.html());

    if (fs::exists(final_dir))
      throw StoreError(final_dir.string() + " exists: an evaluation never overwrites an earlier one");
    fs::rename(tmp, final_dir);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  r.report_dir = final_dir;
  return final_dir;
}

}  // namespace wbaudit::runners
