#include "runners/evaluate/sweep_cells.hpp"

#include <algorithm>
#include <unordered_map>

#include "sim/precision/expected_erasure.hpp"

namespace wbaudit::runners {

std::shared_ptr<const sim::Trace> TraceCache::trace(const std::string& cell_id) {
  if (auto it = m_traces.find(cell_id); it != m_traces.end()) {
    return it->second;
  }
  auto status = m_store->cell_status(cell_id);
  std::shared_ptr<const sim::Trace> trace;
  if (status.canonical_attempt) {
    const AttemptRecord& attempt = status.attempts[*status.canonical_attempt];
    const std::string run = "cell " + (status.cell ? status.cell->name : std::string("?")) + " (id " + cell_id +
                            "), attempt " + attempt.uuid;
    sim::TraceReadOptions read_options;
    read_options.histograms = m_histograms;
    m_files[cell_id] = attempt.dir / "trace.h5";
    try {
      trace = std::make_shared<const sim::Trace>(sim::read_trace(attempt.dir / "trace.h5", read_options));
    } catch (const std::exception& e) {
      throw StoreError(run + ": " + e.what());
    }
    // Every per-step dataset has one entry per recorded step: a trace whose lengths disagree names its run.
    const std::size_t n = trace->recorded_steps.size();
    auto check = [&](const std::string& what, std::size_t size, bool optional) {
      if ((optional && size == 0) || size == n) {
        return;
      }
      throw StoreError(run + ": " + (attempt.dir / "trace.h5").string() + ": " + what + " has " + std::to_string(size) +
                       " entries but recorded_steps has " + std::to_string(n));
    };
    check("loss", trace->loss.size(), true);
    for (const auto& g : trace->groups) {
      const std::string at = "group " + g.name + " ";
      check(at + "nonzero", g.nonzero.size(), false);
      check(at + "erased", g.erased.size(), true);
      check(at + "erased_fraction", g.erased_fraction.size(), true);
      check(at + "zero_weight", g.zero_weight.size(), true);
      for (const auto& [format, p] : g.projected) {
        check(at + "projected/" + format + "/fraction", p.fraction.size(), false);
        for (const auto& [policy, e] : p.expected) {
          check(at + "projected/" + format + "/expected/" + policy + "/fraction", e.fraction.size(), false);
        }
      }
    }
  }
  m_traces.emplace(cell_id, trace);
  return trace;
}

std::filesystem::path TraceCache::file(const std::string& cell_id) {
  if (!trace(cell_id)) {
    return {};
  }
  return m_files.at(cell_id);
}

std::string TraceCache::problem(const std::string& cell_id) const {
  auto status = m_store->cell_status(cell_id);
  if (status.canonical_attempt) {
    return {};
  }
  std::string reason = status.state == CellState::pending ? std::string("missing") : to_string(status.state);
  if (!status.reasons.empty()) {
    reason += ": " + status.reasons.front();
  }
  return reason;
}

void choose_projection(SweepEvaluationCell& cell, const std::string& policy, int sr_bits,
                       const sim::ProjectedSeries& projected, const std::string& reference) {
  if (policy == "nearest") {
    return;
  }
  const std::string wanted = sim::projection_name(sim::make_policy(policy, sr_bits));
  if (projected.expected.contains(wanted)) {
    cell.projection = wanted;
  } else {
    cell.projection_note = policy == "master" ? "no projection models the master copy; scored against nearest"
                                              : reference + " has no " + wanted +
                                                    " projection (made before per-policy projections); scored against "
                                                    "nearest";
  }
}

SweepEvaluationCells read_sweep_evaluation_cells(const SweepStore& store, const SweepSpec& spec, TraceCache& cache,
                                                 const std::vector<std::string>& groups) {
  SweepEvaluationCells out;
  std::unordered_map<std::string, const SweepCell*> spec_cells;  // by name (SweepSpec::cell is a linear search)
  for (const auto& c : spec.cells) {
    spec_cells.emplace(c.name, &c);
  }
  for (const auto& stored : store.cells()) {
    if (stored.role != "target") {
      continue;
    }
    const StoredCell* reference = store.find_by_name(stored.reference);
    auto target = cache.trace(stored.id);
    auto ref = reference ? cache.trace(reference->id) : nullptr;
    if (!target || !ref) {
      std::string why;
      if (!target) {
        why = cache.problem(stored.id);
      } else if (!reference) {
        why = "its reference " + stored.reference + " is not a cell of the sweep";
      } else {
        why = "its reference is incomplete (" + cache.problem(reference->id) + ")";
      }
      out.missing.push_back(stored.name + " (" + why + ")");
      out.missing_names.push_back(stored.name);
      continue;
    }
    const auto found = spec_cells.find(stored.name);
    const SweepCell& spec_cell = found != spec_cells.end() ? *found->second : spec.cell(stored.name);  // throws
    std::vector<std::string> names = !groups.empty() ? groups : spec.evaluation.groups;
    if (names.empty()) {
      for (auto& g : target->groups) {
        names.push_back(g.name);
      }
    }
    for (const auto& group : names) {
      auto has = [&](const sim::Trace& t) {
        return std::any_of(t.groups.begin(), t.groups.end(), [&](const auto& g) { return g.name == group; });
      };
      if (!has(*target)) {
        throw StoreError("target " + stored.name + " has no parameter group \"" + group + "\"");
      }
      if (!has(*ref)) {
        throw StoreError("reference " + reference->name + " has no parameter group \"" + group + "\"");
      }
      if (!ref->group(group).projected.contains(target->format)) {
        throw StoreError("reference " + reference->name + " has no projection for format " + target->format);
      }
      SweepEvaluationCell cell;
      cell.label = evaluation_cell_label(stored.name, group);
      cell.target = &stored;
      cell.reference = reference;
      cell.group = group;
      cell.format = target->format;
      cell.policy = target->policy;
      int bits = 0;
      if (stored.config.contains("target") && stored.config["target"].contains("sr_bits")) {
        bits = stored.config["target"]["sr_bits"].get<int>();
      }
      choose_projection(cell, target->policy, bits, ref->group(group).projected.at(target->format),
                        "reference " + reference->name);
      cell.params = spec_cell.params;
      cell.target_trace = target;
      cell.reference_trace = ref;
      cell.reference_file = cache.file(reference->id);
      out.cells.push_back(std::move(cell));
    }
  }
  return out;
}

}  // namespace wbaudit::runners
