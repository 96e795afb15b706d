// wbaudit import DIR TRACE...: bring traces produced outside the runner (wbaudit.torch, other tools) into a sweep
// directory as external, non-canonical runs with their provenance.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "runners/evaluate/external_run.hpp"
#include "runners/spec/sweep_spec.hpp"
#include "sim/trace/trace.hpp"
#include "sim/trace/trace_reader.hpp"

namespace wbaudit::cli {

namespace {

// What is wrong with a trace to import (sim::trace_problems), read in bounded memory: its series without the
// histograms, then every group's rows (histograms included) one recorded step at a time, so that an unreadable
// histogram is still found and memory does not grow with the recorded steps. Reading throws TraceFileError naming
// the file and what is missing.
std::vector<std::string> import_problems(const std::string& path) {
  sim::TraceReadOptions counts_only;
  counts_only.histograms = false;
  std::vector<std::string> problems = sim::trace_problems(sim::read_trace(path, counts_only));
  const sim::TraceReader reader(path);
  for (std::size_t t = 0; t < reader.recorded_steps(); ++t) {
    for (std::size_t g = 0; g < reader.group_count(); ++g) {
      (void)reader.read_group(g, t, 1);
    }
  }
  return problems;
}

}  // namespace
namespace {

struct Args {
  std::string dir;
  std::vector<std::string> traces;
  std::vector<std::string> names;
  std::string note;
  bool list = false;
  bool report = false;
  std::string reference;
  double threshold = 0.5;
  std::optional<std::int64_t> burn_in;                                         // unset: the sweep report's default
  std::int64_t min_group_size = runners::EvaluationSettings{}.min_group_size;  // 64, as a sweep's [evaluation]
};

void print_runs(const std::string& dir) {
  const auto runs = runners::external_runs(dir);
  std::cout << dir << ": " << runs.size() << " external run(s), none canonical\n";
  for (const auto& r : runs) {
    const auto& m = r.manifest;
    std::cout << "  " << r.name << ": " << m.value("role", std::string("?")) << ", "
              << m.value("format", std::string("?")) << " " << m.value("policy", std::string("?")) << ", "
              << (r.intact ? "intact" : "BROKEN: " + r.problem)
              << "\n    non-canonical: " << m.value("noncanonical_reason", std::string("(no reason recorded)")) << "\n";
  }
}

void print_report(const Args& a) {
  forecast::CrossingOptions options;
  options.threshold = a.threshold;
  options.burn_in = a.burn_in;
  options.min_group_size = a.min_group_size;
  const runners::ExternalComparison c = runners::compare_external_runs(a.dir, a.reference, options);
  std::cout << "external runs (non-canonical, exploratory): source = " << c.cells.front().reference << "\n";
  std::printf("  %-28s %-24s %-6s %-10s %-24s %-12s %-12s\n", "target", "group", "format", "rmse_cell", "category",
              "predicted", "measured");
  for (const auto& x : c.cells) {
    const auto& k = x.crossing;
    std::printf("  %-28s %-24s %-6s %-10.4g %-24s %-12.4g %-12.4g\n", x.target.c_str(), x.group.c_str(),
                x.format.c_str(), x.rmse, forecast::to_string(k.category), k.predicted.time, k.measured.time);
  }
  std::cout << "crossings: " << c.summary.to_string() << "\n  " << runners::crossing_rules_text(c) << "\n";
  for (const auto& s : c.skipped) {
    std::cout << "  skipped: " << s << "\n";
  }
  std::cout << "report: " << runners::write_external_report(a.dir, c).string() << "\n";
}

void run_import(const Args& a) {
  if (a.list) {
    print_runs(a.dir);
    return;
  }
  if (a.traces.empty() && !a.report) {
    throw std::invalid_argument("import: no TRACE given (or use --list / --report)");
  }
  if (!a.names.empty() && a.names.size() != a.traces.size()) {
    throw std::invalid_argument("import: " + std::to_string(a.names.size()) + " --name values for " +
                                std::to_string(a.traces.size()) + " traces (give one per trace, in order)");
  }
  // Validate every trace and name before importing any, so that a bad one leaves the directory as it was: the trace
  // parses, and its content is a record of a run (sim::trace_problems), as `audit` requires of what it reads.
  for (const auto& t : a.traces) {
    const auto problems = import_problems(t);
    if (!problems.empty()) {
      std::string list;
      for (const auto& p : problems) {
        list += "\n  " + p;
      }
      throw std::invalid_argument("import: " + t + " is not a well-formed trace (nothing was imported):" + list);
    }
  }
  for (std::size_t i = 0; i < a.names.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (a.names[i] == a.names[j]) {
        throw std::invalid_argument("import: --name " + a.names[i] + " is given twice (nothing was imported)");
      }
    }
    if (std::filesystem::exists(std::filesystem::path(a.dir) / "external" / a.names[i])) {
      throw std::invalid_argument("import: " + (std::filesystem::path(a.dir) / "external" / a.names[i]).string() +
                                  " already exists (an import never overwrites; nothing was imported)");
    }
  }
  std::vector<runners::ExternalRun> imported;
  try {
    for (std::size_t i = 0; i < a.traces.size(); ++i) {
      runners::ImportOptions options;
      if (!a.names.empty()) {
        options.name = a.names[i];
      }
      options.note = a.note;
      imported.push_back(runners::import_external_run(a.dir, a.traces[i], options));
      const auto& run = imported.back();
      std::cout << "imported " << a.traces[i] << " -> " << run.dir.string() << " ("
                << run.manifest["role"].get<std::string>() << ", " << run.manifest["format"].get<std::string>() << " "
                << run.manifest["policy"].get<std::string>() << ", non-canonical: external run)\n";
    }
    if (a.report) {
      print_report(a);
    }
  } catch (...) {
    // All or nothing: the runs this command imported are removed again, and the message says so.
    for (const auto& run : imported) {
      std::error_code ignored;
      std::filesystem::remove_all(run.dir, ignored);
    }
    if (!imported.empty()) {
      std::cerr << "wbaudit import: removed the " << imported.size()
                << " run(s) imported above again (an import with --report is all or nothing)\n";
    }
    throw;
  }
}

}  // namespace

void add_import_command(CLI::App& app) {
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("import",
                                 "Bring external traces (e.g. from wbaudit.torch) into a sweep directory "
                                 "as non-canonical external runs with their provenance");
  cmd->add_option("dir", args->dir, "Sweep directory (created when absent); runs go to DIR/external/<name>/")
      ->required();
  cmd->add_option(
      "traces", args->traces,
      "trace.h5 files (schema wbaudit.trace/4, /3, /2 or /1; a partial trace of an unfinished run is refused)");
  cmd->add_option("--name", args->names, "Run name per trace, in order (default <role>-<format>-<policy>-<sha8>)");
  cmd->add_option("--note", args->note, "Free text recorded in each manifest");
  cmd->add_flag("--list", args->list, "List the external runs of DIR and whether each is intact");
  cmd->add_flag("--report", args->report,
                "After importing: the source forecast (external reference) vs every external target's measured "
                "erased fraction: rmse_cell and crossings -> DIR/external/report.md, crossings.csv");
  cmd->add_option("--reference", args->reference, "External reference run for --report (default: the only one)");
  cmd->add_option("--threshold", args->threshold, "Crossing threshold theta for --report (default 0.5)");
  cmd->add_option("--burn-in", args->burn_in,
                  "Crossing burn-in t0 for --report (default: 0.5% of the shortest target run's steps, as the sweep "
                  "report and evaluate)");
  cmd->add_option("--min-group-size", args->min_group_size,
                  "--report: groups with fewer coordinates are left out of the crossing headline (default 64, as a "
                  "sweep's [evaluation]; 0: none)");
  cmd->footer(
      "Each run gets trace.h5 (a verified copy) and manifest.json: role, format, policy, the trace's provenance\n"
      "(script and its SHA-256, torch version, host, time, as wbaudit.torch records them), where and when it was\n"
      "imported, the SHA-256 of the trace, and canonical = false with the reason. Nothing under cells/ or\n"
      "sweep.json is touched, so canonical cells and registered analyses are unaffected; a name that exists is\n"
      "refused (never overwritten).\n"
      "Examples (runs/audit-tiny/trace.h5: the target trace that audit's example wrote):\n"
      "  wbaudit import runs/imported runs/audit-tiny/trace.h5 --name audited-e4m3 --note \"audit example\"\n"
      "  wbaudit import runs/imported --list");
  cmd->callback([args] { run_import(*args); });
}

namespace {
[[maybe_unused]] const bool registered = register_command(130, add_import_command);
}  // namespace

}  // namespace wbaudit::cli
