#include "runners/evaluate/external_run.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "forecast/alignment.hpp"
#include "forecast/source.hpp"
#include "runners/evaluate/sweep_cells.hpp"
#include "runners/spec/sweep_spec.hpp"
#include "runners/store/identity.hpp"
#include "runners/store/store.hpp"
#include "sim/trace/trace.hpp"
#include "sim/trace/trace_reader.hpp"
#include "util/files.hpp"

namespace wbaudit::runners {
namespace fs = std::filesystem;

namespace {

bool valid_name(const std::string& name) {
  return !name.empty() && name.size() <= 128 && name[0] != '.' && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '=';
  });
}

}  // namespace

ExternalRun import_external_run(const fs::path& sweep_dir, const fs::path& trace_path, const ImportOptions& options) {
  // The header only (its rows were checked by the caller, a step at a time): throws naming the file for anything but
  // a trace.
  const sim::Trace trace = sim::TraceReader(trace_path).header();
  const std::string sha = sha256_file(trace_path);
  const std::string role = trace.mode == "reference" ? "reference" : "target";
  const std::string name =
      options.name ? *options.name : role + "-" + trace.format + "-" + trace.policy + "-" + sha.substr(0, 8);
  if (!valid_name(name)) {
    throw StoreError("import: run name \"" + name + "\" is not valid (letters, digits, - _ . =; not starting with .)");
  }
  nlohmann::json provenance = nlohmann::json::object();
  try {
    provenance = nlohmann::json::parse(trace.config_json);
  } catch (const nlohmann::json::exception&) {
    provenance = {{"config_json", trace.config_json}};
  }
  const fs::path external = sweep_dir / "external";
  const fs::path dest = external / name;
  if (fs::exists(dest)) {
    throw StoreError("import: " + dest.string() + " already exists (an import never overwrites; choose --name)");
  }
  std::string origin = "external run imported by `wbaudit import` from " + fs::absolute(trace_path).string() +
                       "; not produced by wbaudit's runner from a registered sweep";
  if (provenance.contains("script")) {
    origin += " (script " + provenance.value("script", std::string()) + ", sha256 " +
              provenance.value("script_sha256", std::string()).substr(0, 12) + ", torch " +
              provenance.value("torch_version", std::string()) + ")";
  }
  nlohmann::json manifest = {{"schema", kExternalSchema},
                             {"name", name},
                             {"role", role},
                             {"mode", trace.mode},
                             {"format", trace.format},
                             {"policy", trace.policy},
                             {"seed", trace.seed},
                             {"steps", trace.steps},
                             {"groups", nlohmann::json::array()},
                             {"imported_from", fs::absolute(trace_path).string()},
                             {"imported_at", utc_now()},
                             {"imported_on", util::host_name()},
                             {"files", {{"trace.h5", sha}}},
                             {"provenance", provenance},
                             {"canonical", false},
                             {"noncanonical_reason", origin}};
  for (const auto& g : trace.groups) {
    manifest["groups"].push_back(g.name);
  }
  if (!options.note.empty()) {
    manifest["note"] = options.note;
  }
  fs::create_directories(external);
  const fs::path staging = external / ("." + name + ".tmp." + std::to_string(::getpid()));
  fs::remove_all(staging);
  try {
    fs::create_directories(staging);
    fs::copy_file(trace_path, staging / "trace.h5");
    if (sha256_file(staging / "trace.h5") != sha) {
      throw StoreError("import: the copy of " + trace_path.string() + " differs from the original");
    }
    write_file_atomic(staging / "manifest.json", manifest.dump(2) + "\n");
    fs::rename(staging, dest);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(staging, ec);
    throw;
  }
  return ExternalRun{name, dest, manifest, true, ""};
}

std::vector<ExternalRun> external_runs(const fs::path& sweep_dir) {
  std::vector<ExternalRun> runs;
  const fs::path external = sweep_dir / "external";
  if (!fs::is_directory(external)) {
    return runs;
  }
  for (const auto& entry : fs::directory_iterator(external)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.empty() || name[0] == '.') {
      continue;
    }
    ExternalRun run;
    run.name = name;
    run.dir = entry.path();
    std::ifstream in(entry.path() / "manifest.json");
    try {
      run.manifest = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      run.problem = "manifest.json unreadable: " + std::string(e.what());
      runs.push_back(std::move(run));
      continue;
    }
    const fs::path trace = entry.path() / "trace.h5";
    const std::string want = run.manifest.value("/files/trace.h5"_json_pointer, std::string());
    if (run.manifest.value("schema", std::string()) != kExternalSchema) {
      run.problem = "manifest schema is not " + std::string(kExternalSchema);
    } else if (!fs::exists(trace)) {
      run.problem = "trace.h5 missing";
    } else if (sha256_file(trace) != want) {
      run.problem = "trace.h5 changed since the import (SHA-256 differs from the recorded one)";
    } else {
      run.intact = true;
    }
    runs.push_back(std::move(run));
  }
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return runs;
}

}  // namespace wbaudit::runners

namespace wbaudit::runners {

ExternalComparison compare_external_runs(const fs::path& sweep_dir, const std::string& reference,
                                         const forecast::CrossingOptions& given) {
  ExternalComparison out;
  forecast::CrossingOptions& options = out.options;
  options = given;
  const std::vector<ExternalRun> runs = external_runs(sweep_dir);
  const ExternalRun* ref = nullptr;
  std::vector<std::string> refs;
  for (const auto& r : runs) {
    if (r.intact && r.manifest.value("role", std::string()) == "reference") {
      refs.push_back(r.name);
      if (reference.empty() || r.name == reference) {
        ref = &r;
      }
    }
  }
  if (!reference.empty() && !ref) {
    throw StoreError("import --report: no intact external reference run \"" + reference + "\" in " +
                     sweep_dir.string());
  }
  if (reference.empty() && refs.size() != 1) {
    std::string list;
    for (auto& n : refs) {
      list += (list.empty() ? "" : ", ") + n;
    }
    throw StoreError("import --report: " + std::to_string(refs.size()) + " intact external reference runs in " +
                     sweep_dir.string() + (refs.empty() ? "" : " (" + list + ")") + "; choose one with --reference");
  }
  sim::TraceReadOptions counts_only;  // the crossing analysis reads erased fractions and projections, no histogram
  counts_only.histograms = false;
  const sim::Trace ref_trace = sim::read_trace(ref->dir / "trace.h5", counts_only);
  std::vector<std::pair<const ExternalRun*, sim::Trace>> targets;
  for (const auto& r : runs) {
    if (r.manifest.value("role", std::string()) != "target") {
      continue;
    }
    if (!r.intact) {
      out.skipped.push_back(r.name + " (" + r.problem + ")");
      continue;
    }
    targets.emplace_back(&r, sim::read_trace(r.dir / "trace.h5", counts_only));
  }
  if (options.burn_in) {
    out.burn_in_how = "given";
  } else {  // the sweep report's default: 0.5% of the shortest target run
    std::int64_t steps = -1;
    for (const auto& [r, t] : targets) {
      steps = steps < 0 ? t.steps : std::min(steps, t.steps);
    }
    steps = std::max<std::int64_t>(steps, 0);
    const BurnIn burn_in = default_crossing_burn_in(steps);
    options.burn_in = burn_in.steps;
    out.burn_in_how = burn_in.how;
  }
  std::vector<forecast::CellCrossing> crossings;
  for (const auto& [run, t] : targets) {
    const ExternalRun& r = *run;
    for (const auto& g : t.groups) {
      const auto rg = std::find_if(ref_trace.groups.begin(), ref_trace.groups.end(),
                                   [&](const auto& x) { return x.name == g.name; });
      if (rg == ref_trace.groups.end() || !rg->projected.contains(t.format)) {
        out.skipped.push_back(evaluation_cell_label(r.name, g.name) + " (the reference " + ref->name + " has no " +
                              (rg == ref_trace.groups.end() ? "such group" : "projection for " + t.format) + ")");
        continue;
      }
      const forecast::Series predicted = forecast::projected_series(ref_trace, g.name, t.format);
      const forecast::Series measured = forecast::measured_series(t, g.name);
      ExternalCellComparison c;
      c.target = r.name;
      c.reference = ref->name;
      c.group = g.name;
      c.format = t.format;
      const std::vector<double> aligned =
          forecast::align_series(predicted.steps, predicted.values, measured.steps, forecast::OutOfRange::missing);
      double sum = 0;
      for (std::size_t k = 0; k < aligned.size(); ++k) {
        if (std::isfinite(aligned[k]) && std::isfinite(measured.values[k])) {
          const double e = aligned[k] - measured.values[k];
          sum += e * e;
          ++c.steps;
        }
      }
      c.rmse = c.steps ? std::sqrt(sum / c.steps) : std::nan("");
      c.crossing = forecast::compare_cell_crossing(evaluation_cell_label(r.name, g.name), predicted.steps,
                                                   predicted.values, measured.steps, measured.values, options, g.size);
      crossings.push_back(c.crossing);
      out.cells.push_back(std::move(c));
    }
  }
  if (out.cells.empty()) {
    throw StoreError("import --report: no external target run of " + sweep_dir.string() +
                     " can be compared with the reference " + ref->name);
  }
  out.summary = forecast::summarize_crossings(crossings, options);
  return out;
}

std::string crossing_rules_text(const ExternalComparison& c) {
  std::string s =
      "Rules (as the sweep report and `evaluate`): burn-in t0 = " + std::to_string(c.options.burn_in.value_or(0)) +
      " (" + c.burn_in_how + "; a run above the threshold by t0 counts as above at initialization, not as a crossing)";
  if (c.options.min_group_size > 0) {
    s += "; groups of fewer than " + std::to_string(c.options.min_group_size) + " coordinates are left out of the " +
         "headline (" + std::to_string(c.summary.below_min_group_size) + " cells)";
  }
  return s + ".";
}

fs::path write_external_report(const fs::path& sweep_dir, const ExternalComparison& c) {
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return std::string(std::isfinite(v) ? buf : "");
  };
  std::ostringstream csv, md;
  csv << "target,reference,group,format,rmse_cell,steps,category,predicted_crossing,measured_crossing,"
         "relative_error,within_tolerance\n";
  md << "# External runs: source forecast vs measured erased fraction\n\n"
     << "**Non-canonical (external runs imported by `wbaudit import`); exploratory, no gate is evaluated.**\n\n"
     << "Crossings: " << c.summary.to_string() << " (threshold " << num(c.summary.threshold) << ").\n\n"
     << crossing_rules_text(c) << "\n\n"
     << "| target | group | format | rmse_cell | category | predicted crossing | measured crossing | rel. error |\n"
     << "|---|---|---|---|---|---|---|---|\n";
  for (const auto& x : c.cells) {
    const auto& k = x.crossing;
    csv << x.target << ',' << x.reference << ',' << x.group << ',' << x.format << ',' << num(x.rmse) << ',' << x.steps
        << ',' << forecast::to_string(k.category) << ',' << num(k.predicted.time) << ',' << num(k.measured.time) << ','
        << num(k.relative_error) << ',' << (k.within_tolerance ? 1 : 0) << '\n';
    md << "| " << x.target << " | " << x.group << " | " << x.format << " | " << num(x.rmse) << " | "
       << forecast::to_string(k.category) << " | " << num(k.predicted.time) << " | " << num(k.measured.time) << " | "
       << num(k.relative_error) << " |\n";
  }
  if (!c.skipped.empty()) {
    md << "\nSkipped:\n\n";
    for (const auto& s : c.skipped) {
      md << "- " << s << "\n";
    }
  }
  write_file_atomic(sweep_dir / "external" / "crossings.csv", csv.str());
  write_file_atomic(sweep_dir / "external" / "report.md", md.str());
  return sweep_dir / "external" / "report.md";
}

}  // namespace wbaudit::runners

namespace wbaudit::runners {

ExternalEvaluationCells read_external_evaluation_cells(const fs::path& dir, const std::vector<std::string>& groups,
                                                       const std::string& reference, bool histograms) {
  sim::TraceReadOptions read_options;
  read_options.histograms = histograms;
  ExternalEvaluationCells out;
  const std::vector<ExternalRun> runs = external_runs(dir);
  std::vector<const ExternalRun*> refs;
  for (const auto& r : runs) {
    if (r.intact && r.manifest.value("role", std::string()) == "reference" &&
        (reference.empty() || r.name == reference)) {
      refs.push_back(&r);
    }
  }
  if (refs.size() != 1) {
    std::string list;
    for (const auto& r : runs) {
      if (r.manifest.value("role", std::string()) == "reference") {
        list += (list.empty() ? "" : ", ") + r.name + (r.intact ? "" : " (" + r.problem + ")");
      }
    }
    throw StoreError("evaluate: " + dir.string() + " has no sweep.json, so its external runs are evaluated, but " +
                     (reference.empty() ? std::to_string(refs.size()) + " intact external reference runs are there"
                                        : "no intact external reference run is named \"" + reference + "\"") +
                     (list.empty() ? std::string() : " (references: " + list + ")") +
                     (refs.size() > 1 ? "; choose one with --external-reference" : "; import one with wbaudit import"));
  }
  auto stored = [&](const ExternalRun& r, const sim::Trace& t, const std::string& role, const std::string& ref) {
    auto cell = std::make_unique<StoredCell>();
    cell->id = r.manifest.value("/files/trace.h5"_json_pointer, std::string());
    cell->name = "external/" + r.name;
    cell->role = role;
    cell->reference = ref;
    try {
      cell->config = nlohmann::json::parse(t.config_json);
    } catch (const nlohmann::json::exception&) {
      cell->config = nlohmann::json::object();
    }
    out.provenance.push_back(r.name + ": " + r.manifest.value("noncanonical_reason", std::string("external run")));
    out.runs.push_back(std::move(cell));
    return out.runs.back().get();
  };
  const ExternalRun& ref = *refs.front();
  out.reference = ref.name;
  auto ref_trace = std::make_shared<const sim::Trace>(sim::read_trace(ref.dir / "trace.h5", read_options));
  const StoredCell* ref_cell = stored(ref, *ref_trace, "reference", "");
  for (const auto& r : runs) {
    if (r.manifest.value("role", std::string()) != "target") {
      continue;
    }
    if (!r.intact) {
      out.cells.missing.push_back("external/" + r.name + " (" + r.problem + ")");
      out.cells.missing_names.push_back("external/" + r.name);
      continue;
    }
    auto trace = std::make_shared<const sim::Trace>(sim::read_trace(r.dir / "trace.h5", read_options));
    const StoredCell* target = stored(r, *trace, "target", ref_cell->name);
    std::vector<std::string> names = groups;
    if (names.empty()) {
      for (auto& g : trace->groups) {
        names.push_back(g.name);
      }
    }
    for (const auto& group : names) {
      auto has = [&](const sim::Trace& t) {
        return std::any_of(t.groups.begin(), t.groups.end(), [&](const auto& g) { return g.name == group; });
      };
      if (!has(*trace)) {
        throw StoreError("external target " + r.name + " has no parameter group \"" + group + "\"");
      }
      if (!has(*ref_trace)) {
        throw StoreError("external reference " + ref.name + " has no parameter group \"" + group + "\"");
      }
      const auto& g = ref_trace->group(group);
      if (!g.projected.contains(trace->format)) {
        throw StoreError("external reference " + ref.name + " has no projection for format " + trace->format +
                         " (record it with that format among the reference's formats)");
      }
      SweepEvaluationCell cell;
      cell.label = evaluation_cell_label(target->name, group);
      cell.target = target;
      cell.reference = ref_cell;
      cell.group = group;
      cell.format = trace->format;
      cell.policy = trace->policy;
      choose_projection(cell, trace->policy, r.manifest.value("sr_bits", 0), g.projected.at(trace->format),
                        "external reference " + ref.name);
      cell.params = nlohmann::json::object();
      cell.target_trace = trace;
      cell.reference_trace = ref_trace;
      cell.reference_file = ref.dir / "trace.h5";
      out.cells.cells.push_back(std::move(cell));
    }
  }
  if (out.cells.cells.empty()) {
    throw StoreError("evaluate: " + dir.string() + ": no intact external target run to score" +
                     (out.cells.missing.empty() ? std::string() : " (left out: " + out.cells.missing.front() + ")"));
  }
  return out;
}

}  // namespace wbaudit::runners
