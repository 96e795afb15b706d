#pragma once
// The evaluation cells of a sweep directory: one per (target run with a canonical complete trace, parameter group),
// with the target's trace and its declared fp32 reference's trace. Shared by the crossing report of `wbaudit run`
// (sweep_run.cpp) and by `wbaudit evaluate`.
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runners/spec/sweep_spec.hpp"
#include "runners/store/store.hpp"
#include "sim/trace/trace.hpp"

namespace wbaudit::runners {

// Traces of canonical complete attempts, read once each and shared.
class TraceCache {
 public:
  // histograms false: traces are read without what only the analytic grid needs (sim::TraceReadOptions::histograms).
  explicit TraceCache(const SweepStore& store, bool histograms = true) : m_store(&store), m_histograms(histograms) {}
  // The trace.h5 of the cell's newest canonical complete attempt; null when it has none.
  std::shared_ptr<const sim::Trace> trace(const std::string& cell_id);
  // Why trace(cell_id) is null ("pending", "failed: ...", "non-canonical: ..."); empty when it is not.
  std::string problem(const std::string& cell_id) const;
  // The file trace(cell_id) was read from (the analytic grid reads the histograms from it); empty when it is null.
  std::filesystem::path file(const std::string& cell_id);

 private:
  const SweepStore* m_store;
  bool m_histograms = true;
  std::map<std::string, std::shared_ptr<const sim::Trace>> m_traces;
  std::map<std::string, std::filesystem::path> m_files;
};

// An evaluation cell's label in every table and message (summary.csv, trajectories.csv, the evaluation CSVs):
// "<target name>/<group>", e.g. "target/lr_scale=0.5/format=bf16/layer1.weight".
inline std::string evaluation_cell_label(const std::string& target, const std::string& group) {
  return target + "/" + group;
}

struct SweepEvaluationCell {
  std::string label;  // evaluation_cell_label(target name, group)
  const StoredCell* target = nullptr;
  const StoredCell* reference = nullptr;  // the target's declared fp32 reference
  std::string group, format, policy;
  // The reference projection that matches the target's write-back policy: "nearest", or the expected erased
  // fraction of "stochastic", "stochastic-r8", "deadzone-sr", ... (sim::projection_name). When the reference has
  // none for the policy (a trace made before per-policy projections, or the master contrast), "nearest", and
  // projection_note says so.
  std::string projection = "nearest";
  std::string projection_note;
  nlohmann::json params;  // the grid values of the target
  std::shared_ptr<const sim::Trace> target_trace, reference_trace;
  std::filesystem::path reference_file;  // the file reference_trace was read from
};

struct SweepEvaluationCells {
  std::vector<SweepEvaluationCell> cells;  // target order of the store, then group order
  // Target runs left out, "name (reason)": no canonical complete trace, or its reference has none.
  std::vector<std::string> missing;
  std::vector<std::string> missing_names;  // the same, names only
};

// Sets cell.projection / cell.projection_note for a target of write-back `policy` (with `sr_bits`) scored against
// `projected`, the reference's series for the target's format (`reference` names it in the note).
void choose_projection(SweepEvaluationCell& cell, const std::string& policy, int sr_bits,
                       const sim::ProjectedSeries& projected, const std::string& reference);

// Groups: `groups` when not empty, else spec.evaluation.groups, else every group of the target's trace. Throws
// StoreError when a group is absent from a trace or the reference lacks the target format's projection.
SweepEvaluationCells read_sweep_evaluation_cells(const SweepStore& store, const SweepSpec& spec, TraceCache& cache,
                                                 const std::vector<std::string>& groups = {});

}  // namespace wbaudit::runners
