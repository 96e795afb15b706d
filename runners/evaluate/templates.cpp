#include "runners/evaluate/templates.hpp"

#include <algorithm>
#include <set>

#include "forecast/source.hpp"
#include "util/json_path.hpp"
#include "util/text.hpp"

namespace wbaudit::runners::evaluation {
namespace fs = std::filesystem;
using util::join;

namespace {

forecast::HistoryRun history_run(const AnalysisSpec& analysis, std::string run_id, const SweepEvaluationCell& c) {
  return {std::move(run_id), template_class_of(analysis, c), forecast::measured_series(*c.target_trace, c.group)};
}

std::set<std::string> classes_of(const std::vector<forecast::HistoryRun>& runs) {
  std::set<std::string> classes;
  for (const auto& h : runs) {
    classes.insert(h.template_class);
  }
  return classes;
}

// Runs of this sweep declared historical: never a scored run, so no outcome being scored enters a template.
void declared_history(const SweepInputs& in, const ScoredCells& sc, TemplateHistory& history,
                      EvaluationResult& result) {
  const AnalysisSpec& analysis = in.analysis;
  const std::string where = analysis.path.string() + ": template.history_cells";
  std::set<std::string> runs_used;
  for (const auto& c : sc.every_target) {
    if (!matches_any(analysis.history_cells, c.target->name)) {
      continue;
    }
    if (analysis.scored_runs.empty() || matches_any(analysis.scored_runs, c.target->name)) {
      throw AnalysisError(where + ": the run " + c.target->name + " is declared historical and is also scored (" +
                          (analysis.scored_runs.empty()
                               ? std::string("analysis.scored_runs is not declared, so every target run is scored")
                               : "it matches analysis.scored_runs " + join(analysis.scored_runs)) +
                          "): the history must not contain the outcomes being scored");
    }
    history.runs.push_back(history_run(analysis, c.target->name, c));
    runs_used.insert(c.target->name);
  }
  if (runs_used.empty()) {
    throw AnalysisError(where + " " + join(analysis.history_cells) + " matches no complete target run of " +
                        in.sweep_dir.string());
  }
  if (!analysis.template_missing_inconclusive) {
    const std::set<std::string> known_classes = classes_of(history.runs);
    for (const auto& c : sc.cells) {
      const std::string k = template_class_of(analysis, c);
      if (known_classes.contains(k)) {
        continue;
      }
      throw AnalysisError(where + " " + join(analysis.history_cells) + ": no historical run of the template class \"" +
                          k + "\" (needed by " + c.target->name +
                          "; its classes: " + join({known_classes.begin(), known_classes.end()}) +
                          "); declare such runs historical, or template.missing_class = \"inconclusive\"");
    }
  }
  result.template_history = "the " + std::to_string(runs_used.size()) + " target runs of this sweep declared " +
                            "historical (" + join(analysis.history_cells) + "), none of them scored (outcome-blind)";
}

// The sweep's own target runs, leave-run-out (build_evaluation_tables leaves each scored run out of its template).
void leave_run_out_history(const SweepInputs& in, const ScoredCells& sc, TemplateHistory& history,
                           EvaluationResult& result) {
  const AnalysisSpec& analysis = in.analysis;
  for (const auto& c : sc.cells) {
    if (!analysis.history_cells.empty() && !matches_any(analysis.history_cells, c.target->name)) {
      continue;
    }
    history.runs.push_back(history_run(analysis, c.target->name, c));
  }
  result.template_history =
      "the sweep's target runs" +
      (analysis.history_cells.empty() ? std::string() : " matching " + join(analysis.history_cells)) +
      ", leave-run-out (outcome-blind)";
}

// The groups the history sweep is read for: the analysis', else the sweep spec's, else the scored cells'.
std::vector<std::string> history_groups(const SweepInputs& in, const ScoredCells& sc) {
  std::vector<std::string> groups = in.analysis.groups.empty() ? in.spec.evaluation.groups : in.analysis.groups;
  if (groups.empty()) {
    for (const auto& c : sc.cells) {
      if (std::find(groups.begin(), groups.end(), c.group) == groups.end()) {
        groups.push_back(c.group);
      }
    }
  }
  return groups;
}

// The cell ids of the scored sweep's target runs: a history run with one of them would be a scored outcome itself.
std::set<std::string> scored_ids(const SweepInputs& in, const ScoredCells& sc) {
  std::set<std::string> ids;
  if (in.store) {
    for (const auto& c : in.store->cells()) {
      if (c.role == "target") {
        ids.insert(c.id);
      }
    }
  } else {
    for (const auto& c : sc.cells) {
      ids.insert(c.target->id);
    }
  }
  return ids;
}

// An earlier sweep: its canonical target runs are the history. Never the scored outcomes: a history run with the
// configuration (cell id) of a scored target run would be that outcome itself, and is refused.
void earlier_sweep_history(const SweepInputs& in, const ScoredCells& sc, TemplateHistory& history,
                           EvaluationResult& result) {
  const AnalysisSpec& analysis = in.analysis;
  const fs::path dir = other_sweep_dir(in.sweep_dir, analysis.history_sweep);
  const std::string where = analysis.path.string() + ": template.history_sweep: \"" + analysis.history_sweep + "\"";
  try {
    history.store = std::make_unique<SweepStore>(SweepStore::open(dir));
  } catch (const std::exception& e) {
    throw AnalysisError(where + " is not a readable sweep directory (" + dir.string() + "): " + e.what());
  }
  const SweepSpec history_spec = load_sweep_spec(history.store->spec_path());
  history.traces = std::make_unique<TraceCache>(*history.store, /*histograms=*/false);  // erased fractions only
  history.read = std::make_unique<SweepEvaluationCells>(
      read_sweep_evaluation_cells(*history.store, history_spec, *history.traces, history_groups(in, sc)));
  const std::set<std::string> scored = scored_ids(in, sc);
  std::set<std::string> runs_used;
  for (const auto& h : history.read->cells) {
    if (!analysis.history_cells.empty() && !matches_any(analysis.history_cells, h.target->name)) {
      continue;
    }
    if (scored.contains(h.target->id)) {
      throw AnalysisError(where + ": its run " + h.target->name + " has the configuration (cell id " +
                          h.target->id.substr(0, 12) + ") of a target run of the scored sweep " +
                          in.sweep_dir.string() + ": the history must not contain the outcomes being scored");
    }
    // Prefixed, so that leave-run-out (by run id) never matches a scored run of the same name.
    history.runs.push_back(history_run(analysis, analysis.history_sweep + ":" + h.target->name, h));
    runs_used.insert(h.target->name);
  }
  const auto& left_out = history.read->missing;
  if (!analysis.template_missing_inconclusive) {
    const std::set<std::string> known_classes = classes_of(history.runs);
    for (const auto& c : sc.cells) {
      const std::string k = template_class_of(analysis, c);
      if (known_classes.contains(k)) {
        continue;
      }
      throw AnalysisError(
          where + " (" + dir.string() + ") has no canonical target run of the template class \"" + k +
          "\" (needed by " + c.target->name + "; its classes: " +
          (known_classes.empty() ? std::string("none") : join({known_classes.begin(), known_classes.end()})) +
          (left_out.empty() ? std::string() : "; its runs left out: " + join(left_out)) +
          "); add such runs to the history, or declare template.missing_class = \"inconclusive\"");
    }
  }
  result.template_history =
      "the " + std::to_string(runs_used.size()) + " canonical target runs of the sweep " + analysis.history_sweep +
      " (" + dir.string() + ")" +
      (analysis.history_cells.empty() ? std::string() : " matching " + join(analysis.history_cells)) +
      ", never the scored runs (outcome-blind)" + (left_out.empty() ? std::string() : "; left out: " + join(left_out));
}

}  // namespace

std::string template_class_of(const AnalysisSpec& analysis, const SweepEvaluationCell& c) {
  std::string out;
  for (const auto& key : analysis.template_class) {
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
}

TemplateHistory build_template_history(const SweepInputs& in, const ScoredCells& sc, EvaluationResult& result) {
  TemplateHistory history;
  if (in.analysis.history_declared) {
    declared_history(in, sc, history, result);
  } else if (in.analysis.history_sweep.empty()) {
    leave_run_out_history(in, sc, history, result);
  } else {
    earlier_sweep_history(in, sc, history, result);
  }
  return history;
}

}  // namespace wbaudit::runners::evaluation
