#pragma once
// The first step of `wbaudit evaluate` (evaluate.cpp): its inputs. The sweep directory (or a directory of external
// runs only), the sweep's frozen spec, the analysis (given, else the sweep's single registration, else the default)
// and the cells the analysis requires.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runners/evaluate/evaluate.hpp"
#include "runners/spec/analysis_spec.hpp"
#include "runners/spec/sweep_spec.hpp"
#include "runners/store/registry.hpp"
#include "runners/store/store.hpp"

namespace wbaudit::runners::evaluation {

struct SweepInputs {
  std::filesystem::path sweep_dir;
  // The sweep; null for a directory without sweep.json that holds external runs (wbaudit import): those are scored,
  // exploratory and never canonical.
  std::unique_ptr<SweepStore> store;
  SweepSpec spec;  // the frozen spec (a directory of external runs: its name only)
  AnalysisSpec analysis;
  std::optional<Registration> registration;  // the analysis' registration; reset by the standing when unverified
  std::vector<std::string> required;         // the required cells: the registration's, the analysis', or every target
};

// Refuses a sweep whose frozen inputs or signed record were edited, whose journal names registrations that are gone,
// or that holds links (AnalysisError naming each problem); several registrations without --analysis; required_cells
// patterns that match no cell, or any without a sweep.
SweepInputs open_inputs(const std::filesystem::path& sweep_dir, const EvaluateOptions& options);

// Whether `name` matches one of the shell patterns (fnmatch).
bool matches_any(const std::vector<std::string>& patterns, const std::string& name);

// A sweep directory an analysis names ([source] sweep, [template] history_sweep): relative to the evaluated one.
std::filesystem::path other_sweep_dir(const std::filesystem::path& sweep_dir, const std::string& given);

// A configuration or grid value as the tables and template classes spell it: a string as is, else its JSON text.
std::string value_text(const nlohmann::json& value);

}  // namespace wbaudit::runners::evaluation
