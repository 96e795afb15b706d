// wbaudit import DIR TRACE...: bring traces produced outside the runner (wbaudit.torch, other tools) into a sweep
// directory as external, non-canonical runs with their provenance.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "runners/cli/commands.hpp"
#include "runners/external_run.hpp"
#include "sim/trace/trace.hpp"

namespace wbaudit::cli {
namespace {

struct Args {
  std::string dir;
  std::vector<std::string> traces;
  std::vector<std::string> names;
  std::string note;
  bool list = false;
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

void run_import(const Args& a) {
  if (a.list) {
    print_runs(a.dir);
    return;
  }
  if (a.traces.empty()) {
    throw std::invalid_argument("import: no TRACE given (or use --list)");
  }
  if (!a.names.empty() && a.names.size() != a.traces.size()) {
    throw std::invalid_argument("import: " + std::to_string(a.names.size()) + " --name values for " +
                                std::to_string(a.traces.size()) + " traces (give one per trace, in order)");
  }
  // Validate every trace before importing any, so that a bad one leaves the directory as it was.
  for (const auto& t : a.traces) {
    sim::read_trace(t);  // throws naming the file and what is missing
  }
  for (std::size_t i = 0; i < a.traces.size(); ++i) {
    runners::ImportOptions options;
    if (!a.names.empty()) {
      options.name = a.names[i];
    }
    options.note = a.note;
    const runners::ExternalRun run = runners::import_external_run(a.dir, a.traces[i], options);
    std::cout << "imported " << a.traces[i] << " -> " << run.dir.string() << " ("
              << run.manifest["role"].get<std::string>() << ", " << run.manifest["format"].get<std::string>() << " "
              << run.manifest["policy"].get<std::string>() << ", non-canonical: external run)\n";
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
  cmd->add_option("traces", args->traces, "trace.h5 files (schema wbaudit.trace/1)");
  cmd->add_option("--name", args->names, "Run name per trace, in order (default <role>-<format>-<policy>-<sha8>)");
  cmd->add_option("--note", args->note, "Free text recorded in each manifest");
  cmd->add_flag("--list", args->list, "List the external runs of DIR and whether each is intact");
  cmd->footer(
      "Each run gets trace.h5 (a verified copy) and manifest.json: role, format, policy, the trace's provenance\n"
      "(script and its SHA-256, torch version, host, time, as wbaudit.torch records them), where and when it was\n"
      "imported, the SHA-256 of the trace, and canonical = false with the reason. Nothing under cells/ or\n"
      "sweep.json is touched, so canonical cells and registered analyses are unaffected; a name that exists is\n"
      "refused (never overwritten).");
  cmd->callback([args] { run_import(*args); });
}

}  // namespace wbaudit::cli
