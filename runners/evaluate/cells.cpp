#include "runners/evaluate/cells.hpp"

#include <fnmatch.h>

#include <algorithm>

#include "util/json_path.hpp"
#include "util/text.hpp"

namespace wbaudit::runners::evaluation {
namespace fs = std::filesystem;
using util::join;

namespace {

// Flattens {"a": {"b": 1}} into {"a.b": 1}.
void flatten(const nlohmann::json& j, const std::string& prefix, std::map<std::string, nlohmann::json>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      flatten(v, prefix.empty() ? k : prefix + "." + k, out);
    }
  } else {
    out[prefix] = j;
  }
}

// The cells of the sweep's canonical complete traces or, without a sweep, of the external runs.
void read_cells(const SweepInputs& in, const EvaluateOptions& options, ScoredCells& sc, EvaluationResult& result) {
  const AnalysisSpec& analysis = in.analysis;
  if (in.store) {
    // Held without the histograms: the analytic grid reads them from each reference's file a block of recorded steps at
    // a time (forecast::EvaluationCell::reference_file), so what evaluate holds does not grow with them.
    sc.traces = std::make_unique<TraceCache>(*in.store, /*histograms=*/false);
    sc.read = read_sweep_evaluation_cells(*in.store, in.spec, *sc.traces, analysis.groups);
    return;
  }
  if (!analysis.scored_runs.empty() || !analysis.source_sweep.empty() || !analysis.source_overrides.empty()) {
    throw AnalysisError(analysis.path.string() + ": analysis.scored_runs, source.sweep and source.overrides " +
                        "need a sweep; " + in.sweep_dir.string() + " holds only external runs");
  }
  sc.external = std::make_unique<ExternalEvaluationCells>(
      read_external_evaluation_cells(in.sweep_dir, analysis.groups, options.external_reference, /*histograms=*/false));
  sc.read = std::move(sc.external->cells);
  result.standing = "exploratory: external runs (wbaudit import), never canonical";
  for (const auto& p : sc.external->provenance) {
    result.standing_reasons.push_back(p);
  }
}

// A declared cohort (analysis.scored_runs): only its target runs are scored (and serve as leave-run-out history).
void keep_scored_runs(const SweepInputs& in, ScoredCells& sc) {
  const AnalysisSpec& analysis = in.analysis;
  if (analysis.scored_runs.empty()) {
    return;
  }
  for (const auto& pattern : analysis.scored_runs) {
    bool matched = false;
    for (const auto& c : in.store->cells()) {
      matched = matched || (c.role == "target" && ::fnmatch(pattern.c_str(), c.name.c_str(), 0) == 0);
    }
    if (!matched) {
      throw AnalysisError(analysis.path.string() + ": analysis.scored_runs: \"" + pattern +
                          "\" matches no target run of the sweep " + in.sweep_dir.string());
    }
  }
  std::erase_if(sc.read.cells,
                [&](const SweepEvaluationCell& c) { return !matches_any(analysis.scored_runs, c.target->name); });
  std::vector<std::string> missing;
  std::vector<std::string> names;
  for (std::size_t k = 0; k < sc.read.missing_names.size(); ++k) {
    if (!matches_any(analysis.scored_runs, sc.read.missing_names[k])) {
      continue;
    }
    missing.push_back(sc.read.missing[k]);
    names.push_back(sc.read.missing_names[k]);
  }
  sc.read.missing = missing;
  sc.read.missing_names = names;
}

// The reference run of `store` with `c`'s reference configuration and the [source] overrides.
const StoredCell& overridden_reference(const AnalysisSpec& analysis, const SweepStore& store,
                                       const std::map<std::string, nlohmann::json>& overrides,
                                       const SweepEvaluationCell& c) {
  nlohmann::json wanted = c.reference->config;
  for (const auto& [path, value] : overrides) {
    util::set_json_at(wanted, path, value);
  }
  const StoredCell* found = nullptr;
  for (const auto& s : store.cells()) {
    if (s.role == "reference" && s.config == wanted) {
      found = &s;
    }
  }
  if (!found) {
    throw AnalysisError(
        analysis.path.string() + ": " + (analysis.source_overrides.empty() ? "source.sweep" : "source.overrides") +
        ": no reference run of the sweep " + store.dir().string() + " has " + c.reference->name + "'s configuration" +
        (analysis.source_overrides.empty() ? "" : " with " + analysis.source_overrides.dump()) + " (needed by " +
        c.target->name + ")");
  }
  return *found;
}

// `source`: the declared reference, or the reference with the declared one's configuration and the overrides (of
// this sweep, or of the sweep directory [source] sweep names).
void choose_sources(const SweepInputs& in, ScoredCells& sc, EvaluationResult& result) {
  const AnalysisSpec& analysis = in.analysis;
  if (!analysis.source_sweep.empty()) {
    const fs::path dir = other_sweep_dir(in.sweep_dir, analysis.source_sweep);
    try {
      sc.source_store = std::make_unique<SweepStore>(SweepStore::open(dir));
    } catch (const std::exception& e) {
      throw AnalysisError(analysis.path.string() + ": source.sweep: \"" + analysis.source_sweep +
                          "\" is not a readable sweep directory (" + dir.string() + "): " + e.what());
    }
    sc.source_store_traces = std::make_unique<TraceCache>(*sc.source_store, /*histograms=*/false);
  }
  const SweepStore* store = sc.source_store ? sc.source_store.get() : in.store.get();
  sc.source_traces = sc.source_store_traces ? sc.source_store_traces.get() : sc.traces.get();
  if (sc.external) {
    result.source_reference = "the external reference run " + sc.external->reference +
                              " (imported; its seed, init and data order are whatever its training script used)";
    return;
  }
  if (analysis.source_overrides.empty() && analysis.source_sweep.empty()) {
    result.source_reference = "each target's declared fp32 reference (same seed, init and data order)";
    return;
  }
  result.source_reference =
      "the fp32 reference with the declared one's configuration" +
      (analysis.source_overrides.empty() ? std::string() : " and " + analysis.source_overrides.dump()) +
      (analysis.source_sweep.empty()
           ? std::string()
           : " from the sweep " + analysis.source_sweep + " (" + store->dir().string() + ")") +
      " (a predeclared trace, not matched)";
  std::map<std::string, nlohmann::json> overrides;
  flatten(analysis.source_overrides, "", overrides);
  for (const auto& c : sc.read.cells) {
    if (!sc.source_of.contains(c.target->name)) {
      sc.source_of[c.target->name] = &overridden_reference(analysis, *store, overrides, c);
    }
  }
}

// A target whose source trace is missing is missing for this analysis.
void keep_cells_with_source(ScoredCells& sc, EvaluationResult& result) {
  std::map<std::string, std::string> extra_missing;
  for (const auto& c : sc.read.cells) {
    auto it = sc.source_of.find(c.target->name);
    if (it != sc.source_of.end() && !sc.source_traces->trace(it->second->id)) {
      extra_missing[c.target->name] = "its source reference " + it->second->name + " is incomplete (" +
                                      sc.source_traces->problem(it->second->id) + ")";
      continue;
    }
    sc.cells.push_back(c);
  }
  for (const auto& [name, why] : extra_missing) {
    result.missing_targets.push_back(name + " (" + why + ")");
    sc.read.missing_names.push_back(name);
  }
}

// Each required cell's state for the gates: present, canonical, and why not.
std::vector<stats::CellStatus> required_states(const SweepInputs& in, const ScoredCells& sc,
                                               const std::vector<std::string>& missing_targets) {
  std::vector<stats::CellStatus> states;
  for (const auto& name : in.required) {
    stats::CellStatus st;
    st.cell = name;
    const StoredCell* stored = in.store ? in.store->find_by_name(name) : nullptr;
    if (!stored) {
      st.reason = "not a cell of this sweep";
      states.push_back(st);
      continue;
    }
    auto status = in.store->cell_status(stored->id);
    st.present = status.state != CellState::pending || !status.attempts.empty();
    st.canonical = status.state == CellState::done;
    const auto& missing = sc.read.missing_names;
    if (!st.canonical) {
      st.reason = status.state == CellState::pending ? std::string("missing") : to_string(status.state);
      if (!status.reasons.empty()) {
        st.reason += ": " + status.reasons.front();
      }
    } else if (std::find(missing.begin(), missing.end(), name) != missing.end()) {
      st.canonical = false;
      for (const auto& m : missing_targets) {
        if (m.rfind(name + " (", 0) == 0) {
          st.reason = m.substr(name.size() + 2, m.size() - name.size() - 3);
        }
      }
    }
    states.push_back(st);
  }
  return states;
}

}  // namespace

ScoredCells read_scored_cells(const SweepInputs& in, const EvaluateOptions& options, EvaluationResult& result) {
  ScoredCells sc;
  read_cells(in, options, sc, result);
  if (in.analysis.history_declared) {
    sc.every_target = sc.read.cells;
  }
  keep_scored_runs(in, sc);
  result.missing_targets = sc.read.missing;
  choose_sources(in, sc, result);
  keep_cells_with_source(sc, result);
  result.required = required_states(in, sc, result.missing_targets);
  if (sc.cells.empty()) {
    throw AnalysisError("no evaluation cell in " + in.sweep_dir.string() +
                        ": no target run has a canonical complete trace with its reference (" +
                        join(result.missing_targets, "; ") + ")");
  }
  return sc;
}

}  // namespace wbaudit::runners::evaluation
