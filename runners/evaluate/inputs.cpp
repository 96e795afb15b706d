#include "runners/evaluate/inputs.hpp"

#include <fnmatch.h>

#include <algorithm>

#include "util/text.hpp"

namespace wbaudit::runners::evaluation {
namespace fs = std::filesystem;
using util::join;

namespace {

// The sweep's store, refusing one that is not the registered sweep: a frozen spec or binary that is not the
// registered one, an edited signed record (journal, sweep.json), registrations the journal records that are gone,
// and links inside the sweep (docs/contracts.md, "Signed provenance").
std::unique_ptr<SweepStore> open_checked_store(const fs::path& sweep_dir) {
  auto store = std::make_unique<SweepStore>(SweepStore::open(sweep_dir));
  auto problems = store->check_frozen_inputs();
  const auto record = store->check_record();
  const auto missing = missing_registrations(*store);
  const auto links = store->link_problems();
  if (!problems.empty() || !record.empty() || !missing.empty() || !links.empty()) {
    for (const auto* more : {&record, &missing, &links}) {
      problems.insert(problems.end(), more->begin(), more->end());
    }
    throw AnalysisError("cannot evaluate " + sweep_dir.string() + ": " + join(problems, "; ") +
                        " (`wbaudit run SPEC --out DIR --resume` with the registered spec and binary restores the "
                        "frozen copies)");
  }
  return store;
}

// The analysis: given, else the sweep's single registration, else the default.
void choose_analysis(SweepInputs& in, const EvaluateOptions& options) {
  if (options.analysis) {
    in.analysis = load_analysis_spec(*options.analysis);
    in.registration = find_registration(in.sweep_dir, in.analysis.text, in.store.get());
    return;
  }
  auto regs = registrations(in.sweep_dir, in.store.get());
  if (regs.size() > 1) {
    std::vector<std::string> list;
    list.reserve(regs.size());
    for (auto& r : regs) {
      list.push_back(r.frozen.string());
    }
    throw AnalysisError(in.sweep_dir.string() + " has " + std::to_string(regs.size()) +
                        " registered analyses; choose one with --analysis (" + join(list, "; ") + ")");
  }
  if (regs.size() == 1) {
    in.registration = regs.front();
    in.analysis = load_analysis_spec(in.registration->frozen);
  } else {
    in.analysis = default_analysis_spec();
  }
}

// Required cells: the registration's, else the analysis' patterns, else every target.
std::vector<std::string> required_cells(const SweepInputs& in) {
  const AnalysisSpec& analysis = in.analysis;
  std::vector<std::string> required;
  if (in.registration) {
    return in.registration->outcome_cells;
  }
  if (analysis.required_declared) {
    if (!in.store) {
      throw AnalysisError(analysis.path.string() + ": required_cells: " + in.sweep_dir.string() +
                          " holds only external runs, which are never canonical and cannot be required cells");
    }
    for (const auto& pattern : analysis.required_cells) {
      bool matched = false;
      for (const auto& c : in.store->cells()) {
        if (::fnmatch(pattern.c_str(), c.name.c_str(), 0) != 0) {
          continue;
        }
        matched = true;
        if (std::find(required.begin(), required.end(), c.name) == required.end()) {
          required.push_back(c.name);
        }
      }
      if (!matched) {
        throw AnalysisError(analysis.path.string() + ": required_cells: \"" + pattern +
                            "\" matches no cell of the sweep " + in.sweep_dir.string());
      }
    }
  } else if (in.store) {
    for (const auto& c : in.store->cells()) {
      if (c.role == "target") {
        required.push_back(c.name);
      }
    }
  }
  return required;
}

}  // namespace

bool matches_any(const std::vector<std::string>& patterns, const std::string& name) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& p) { return ::fnmatch(p.c_str(), name.c_str(), 0) == 0; });
}

fs::path other_sweep_dir(const fs::path& sweep_dir, const std::string& given) {
  const fs::path p(given);
  return p.is_absolute() ? p : (sweep_dir / p).lexically_normal();
}

std::string value_text(const nlohmann::json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

SweepInputs open_inputs(const fs::path& sweep_dir, const EvaluateOptions& options) {
  SweepInputs in;
  in.sweep_dir = sweep_dir;
  // A directory without sweep.json that holds external runs (wbaudit import): its external runs are scored,
  // exploratory and never canonical. Otherwise the sweep's canonical cells (external runs beside them are not scored).
  const bool external_only = !fs::exists(sweep_dir / "sweep.json") && fs::is_directory(sweep_dir / "external");
  if (external_only) {
    in.spec.name = fs::absolute(sweep_dir).lexically_normal().filename().string() + " (external runs)";
  } else {
    in.store = open_checked_store(sweep_dir);
    in.spec = load_sweep_spec(in.store->spec_path());  // the frozen copy, checked above
  }
  choose_analysis(in, options);
  in.required = required_cells(in);
  return in;
}

}  // namespace wbaudit::runners::evaluation
