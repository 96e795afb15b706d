// wbaudit report DIR: write everything `wbaudit run` writes after its cells (summary.csv, trajectories.csv, the
// crossing report and, for language-model sweeps, the loss report) from a sweep directory's canonical traces. The
// Slurm report job runs it before `evaluate`; it also refreshes a report after `--resume` or hand-repairs.
#include <iostream>

#include "cli/commands.hpp"
#include "runners/evaluate/sweep_outputs.hpp"
#include "runners/spec/sweep_spec.hpp"
#include "runners/store/store.hpp"

namespace wbaudit::cli {

void add_report_command(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto quiet = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("report",
                                 "Write summary.csv, trajectories.csv and the reports of a sweep directory from its "
                                 "canonical traces (what `wbaudit run` writes after the cells)");
  cmd->add_option("dir", *dir, "Sweep directory")->required()->check(CLI::ExistingDirectory);
  cmd->add_flag("-q,--quiet", *quiet, "Print nothing but errors");
  cmd->footer(
      "Cells without a canonical complete trace are left out and listed in the report.\n"
      "Example: wbaudit report runs/tiny");
  cmd->callback([dir, quiet] {
    const auto store = runners::SweepStore::open(*dir);
    const runners::SweepSpec spec = runners::load_sweep_spec(store.spec_path());
    const runners::SweepOutputs out = runners::write_sweep_outputs(store, spec);
    if (!*quiet) {
      runners::print_outputs(std::cout, out);
    }
  });
}

namespace {
[[maybe_unused]] const bool registered = register_command(50, add_report_command);
}  // namespace

}  // namespace wbaudit::cli
