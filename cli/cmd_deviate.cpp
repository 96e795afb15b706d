// wbaudit deviate DIR --reason ... --cells ...: append to the sweep's append-only deviation log.
#include <iostream>

#include "cli/commands.hpp"
#include "runners/store/registry.hpp"
#include "runners/store/store.hpp"

namespace wbaudit::cli {

void add_deviate_command(CLI::App& app) {
  struct Args {
    std::string dir;
    std::string reason;
    std::string what;
    std::vector<std::string> cells;
    std::string who;
    bool repair = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("deviate",
                                 "Record a deviation from the registered plan in the sweep's append-only "
                                 "log; analyses run under a deviation are labelled retrospective");
  cmd->add_option("dir", args->dir, "Sweep directory")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--reason,--why", args->reason, "Why the plan was not followed")->required();
  cmd->add_option("--what", args->what, "What was done differently (default: the reason)");
  cmd->add_option("--cells", args->cells, "Affected cells (names or ids; comma-separated or repeated)")->delimiter(',');
  cmd->add_option("--who", args->who, "Who deviates (default: $USER)");
  cmd->add_flag("--repair-log", args->repair,
                "The key holder's repair of a deviation log whose hash chain broke: keep the entries signed by the "
                "sweep's key, drop the others, and record the repair (itself a deviation) in the log and the journal");
  cmd->footer(
      "Entries are appended under the sweep's records lock, and the journal records the log's new end, so a cut\n"
      "or deleted log is detected by `status --check` and refused by `evaluate`.\n"
      "Example: wbaudit deviate runs/tiny --reason \"node failure; reran on another partition\" "
      "--cells target/lr_scale=0.5/format=e4m3");
  cmd->callback([args] {
    const auto store = runners::SweepStore::open(args->dir);
    if (args->repair) {
      if (!args->cells.empty() || !args->what.empty()) {
        throw CLI::ValidationError("--repair-log", "takes --reason (and --who) only");
      }
      const auto r = runners::repair_deviation_log(store, args->reason, args->who);
      std::cout << "deviation log repaired: kept " << r.kept << " signed entries, dropped " << r.dropped.size()
                << ", now " << r.lines << " lines (the repair is itself a recorded deviation)\n";
      return;
    }
    const auto d = runners::record_deviation(store, args->what.empty() ? args->reason : args->what, args->reason,
                                             args->cells, args->who);
    std::cout << "deviation recorded in " << (store.dir() / "deviations.jsonl").string() << " (" << d.when << ", "
              << d.who << ", " << d.cells.size() << " cells)\n";
  });
}

namespace {
[[maybe_unused]] const bool registered = register_command(60, add_deviate_command);
}  // namespace

}  // namespace wbaudit::cli
