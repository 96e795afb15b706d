// wbaudit register ANALYSIS.toml --sweep DIR: freeze an analysis before the outcomes it names exist.
#include <iostream>

#include "cli/commands.hpp"
#include "runners/store/registry.hpp"
#include "runners/store/store.hpp"

namespace wbaudit::cli {

void add_register_command(CLI::App& app) {
  struct Args {
    std::string analysis;
    std::string sweep;
    bool retrospective = false;
    std::string who;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("register",
                                 "Preregister an analysis (predictors, gates, required cells, bootstrap "
                                 "settings): freeze it with its hash and time in the sweep directory");
  cmd->add_option("analysis", args->analysis, "Analysis spec (TOML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--sweep", args->sweep, "Sweep directory")->required()->check(CLI::ExistingDirectory);
  cmd->add_flag("--retrospective", args->retrospective,
                "Register although outcomes it names already exist; the analysis is labelled retrospective");
  cmd->add_option("--who", args->who, "Who registers (default: $USER)");
  cmd->footer(
      "The outcome cells are the analysis' required_cells (names or patterns like \"target/*format=e4m3\"), or\n"
      "every target cell when it declares none. Registration is refused when any of them already has a\n"
      "completed attempt, unless --retrospective.\n"
      "Example (on runs/tiny-slurm, the sweep that submit's first example queued, before its cells run):\n"
      "  wbaudit register examples/two_layer_analysis.toml --sweep runs/tiny-slurm");
  cmd->callback([args] {
    const auto store = runners::SweepStore::open(args->sweep);
    const auto r = runners::register_analysis(store, args->analysis, args->retrospective, args->who);
    std::cout << "registered " << args->analysis << "\n"
              << "  sha256   " << r.sha256 << "\n"
              << "  time     " << r.registered << " by " << r.who << "\n"
              << "  frozen   " << r.frozen.string() << "\n"
              << "  outcomes " << r.outcome_cells.size() << " cells"
              << (r.retrospective ? ", retrospective (" + std::to_string(r.outcomes_present_at_registration.size()) +
                                        " already present)"
                                  : ", none present yet")
              << "\n";
  });
}

namespace {
[[maybe_unused]] const bool registered = register_command(40, add_register_command);
}  // namespace

}  // namespace wbaudit::cli
