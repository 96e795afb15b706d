#pragma once
// External runs: traces produced outside wbaudit's runner (e.g. by wbaudit.torch from a PyTorch training script),
// brought into a sweep directory by `wbaudit import` under external/<name>/ with their provenance. They are never
// canonical: the manifest says so and why, and nothing in cells/ or sweep.json is touched.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "forecast/crossing.hpp"
#include "runners/evaluate/sweep_cells.hpp"

namespace wbaudit::runners {

inline constexpr const char* kExternalSchema = "wbaudit.external/1";

// NOLINTNEXTLINE(bugprone-exception-escape): its implicit move of nlohmann::json (not noexcept in the check's view)
struct ExternalRun {
  std::string name;
  std::filesystem::path dir;  // DIR/external/<name>
  nlohmann::json manifest;    // schema, role, provenance, sha256, canonical = false, noncanonical_reason
  bool intact = false;        // trace.h5 present with the recorded SHA-256
  std::string problem;        // why not intact
};

struct ImportOptions {
  std::optional<std::string> name;  // default: <role>-<format>-<policy>-<first 8 hex of the trace's SHA-256>
  std::string note;                 // free text recorded in the manifest
};

// Imports one trace.h5 (validated with sim::read_trace) into sweep_dir/external/<name>/ atomically (a temporary
// directory renamed into place). sweep_dir is created when absent. Throws StoreError when the name exists (an
// import never overwrites), std::runtime_error naming the file for an invalid trace.
ExternalRun import_external_run(const std::filesystem::path& sweep_dir, const std::filesystem::path& trace,
                                const ImportOptions& options = {});

// The external runs of a directory, by name, each checked against its recorded hash.
std::vector<ExternalRun> external_runs(const std::filesystem::path& sweep_dir);

}  // namespace wbaudit::runners

namespace wbaudit::runners {

// Forecast vs outcome over external runs: for every intact external target run and parameter group, the `source`
// projection of the external reference run (its projected erased fraction under the target's format) against the
// measured erased fraction: RMSE over the target's recorded steps (the projection aligned onto them by linear
// interpolation, docs/forecasting.md) and the crossing comparison of forecast/crossing.hpp. Exploratory and
// non-canonical by construction; no gate is evaluated.
struct ExternalCellComparison {
  std::string target, reference, group, format;
  double rmse = 0;  // over steps where both are defined; NaN when none
  int steps = 0;    // steps in the RMSE
  forecast::CellCrossing crossing;
};

struct ExternalComparison {
  std::vector<ExternalCellComparison> cells;
  forecast::CrossingSummary summary;
  forecast::CrossingOptions options;  // the rules applied (burn-in and minimum group size resolved)
  std::string burn_in_how;           // e.g. "default: 0.5% (5 per mille) of the 10000 steps of the shortest target run"
  std::vector<std::string> skipped;  // "run (why)"
};

// reference: the external reference run to use; empty: the only intact one (StoreError when there are none or
// several). Throws StoreError when no target cell can be compared. The crossing rules are the sweep report's and
// `evaluate`'s: without options.burn_in, the default burn-in of the shortest intact target run
// (forecast::default_burn_in); options.min_group_size (the sweep spec's default, 64, when the caller keeps it) leaves
// smaller groups out of the headline.
ExternalComparison compare_external_runs(const std::filesystem::path& sweep_dir, const std::string& reference,
                                         const forecast::CrossingOptions& options = {});

// The crossing rules c applied, one sentence (the burn-in, how it was set, the minimum group size).
std::string crossing_rules_text(const ExternalComparison& c);

// Writes DIR/external/report.md and DIR/external/crossings.csv (atomically); returns the report's path.
std::filesystem::path write_external_report(const std::filesystem::path& sweep_dir, const ExternalComparison& c);

}  // namespace wbaudit::runners

namespace wbaudit::runners {

// External runs as evaluation cells for `wbaudit evaluate` of a directory that holds only external runs (no
// sweep.json): every intact external target run x parameter group (`groups`, else every group of the target), each
// paired with one external reference run (`reference`, else the only intact one: StoreError when there are none or
// several, listing them). Each run is represented by a StoredCell named "external/<name>" (id: the trace's SHA-256,
// config: the trace's config_json) owned by the result; the projection follows the target's policy as for sweep
// cells. Runs that are not intact are listed in `cells.missing` with the reason. Never canonical: the caller labels
// the evaluation exploratory.
struct ExternalEvaluationCells {
  std::vector<std::unique_ptr<StoredCell>> runs;  // owns what cells point to
  SweepEvaluationCells cells;
  std::string reference;                // the reference run's name
  std::vector<std::string> provenance;  // "name: noncanonical_reason", every run used
};
// histograms: read the traces' d and margin histograms too; `evaluate` reads them without (the analytic grid reads the
// histograms from each cell's reference_file a block of recorded steps at a time), so its memory does not grow with
// the recorded steps' histograms.
ExternalEvaluationCells read_external_evaluation_cells(const std::filesystem::path& dir,
                                                       const std::vector<std::string>& groups,
                                                       const std::string& reference = {}, bool histograms = true);

}  // namespace wbaudit::runners
