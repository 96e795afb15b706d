// wbaudit evaluate DIR [--analysis A.toml] [--out REPORTDIR]: the skill report of a sweep.
#include <filesystem>
#include <iostream>

#include "cli/commands.hpp"
#include "runners/evaluate/evaluate.hpp"
#include "runners/store/store.hpp"

namespace wbaudit::cli {

void add_evaluate_command(CLI::App& app) {
  struct Args {
    std::string sweep;
    std::string analysis;
    std::string out;
    bool no_figures = false;
    bool check = false;
    std::string external_reference;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("evaluate",
                                 "Skill report of a sweep: predictors vs templates and common time, directional "
                                 "specificity, decomposition, gates, crossings (Markdown + HTML + CSV + figures)");
  cmd->add_option("sweep", args->sweep,
                  "Sweep directory; or a directory of external runs only (wbaudit import into a directory without "
                  "sweep.json), whose imported target runs are then scored against its external reference: "
                  "exploratory, never canonical")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--external-reference", args->external_reference,
                  "Directory of external runs: the reference run to forecast from (default: the only one)");
  cmd->add_option("--analysis", args->analysis,
                  "Analysis spec (TOML; default: the sweep's registered analysis, else the built-in default)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--out,-o", args->out,
                  "Report directory (must not exist; default: DIR/evaluations/<UTC time>-<analysis hash>)");
  cmd->add_flag("--no-figures", args->no_figures, "Skip the gnuplot figures");
  cmd->add_flag("--check", args->check,
                "Exit 3 when a gate fails, 4 when none fails but one is inconclusive (or no gate is declared), "
                "0 when every gate passes, 5 when every gate passes under a retrospective analysis (for CI; the "
                "report is written either way)");
  cmd->footer(
      "Writes report.md, report.html, statistics.csv, cells.csv, gates.csv, decomposition.csv, crossings.csv,\n"
      "series.csv, analysis.toml and figures/ into a new directory; an earlier evaluation is never overwritten.\n"
      "A registered analysis is honoured: gates are inconclusive when a required cell is missing or not\n"
      "canonical, and analyses under a recorded deviation are labelled retrospective. See docs/evaluate.md.\n"
      "Exit status: 0, or 1 on an error; with --check, 3 when a gate fails, 4 when a gate is inconclusive and 5\n"
      "when every gate passes under a retrospective analysis.\n"
      "Example: wbaudit evaluate runs/tiny --analysis examples/two_layer_analysis.toml");
  cmd->callback([args] {
    runners::EvaluateOptions options;
    options.external_reference = args->external_reference;
    if (!args->analysis.empty()) {
      options.analysis = args->analysis;
    }
    options.out = args->out;
    options.figures = !args->no_figures;
    // An existing --out is refused before anything is computed (the report never overwrites).
    if (!args->out.empty() && std::filesystem::exists(std::filesystem::symlink_status(args->out))) {
      throw runners::StoreError("evaluate: --out " + args->out +
                                " already exists (an evaluation never overwrites another; choose a new directory)");
    }
    auto result = runners::evaluate_sweep(args->sweep, options);
    auto dir = runners::write_evaluation_report(result, options);
    std::cout << "evaluated " << result.cells.size() << " cells x " << result.steps.size() << " steps of "
              << result.sweep_name << " (" << result.standing << ") in " << result.seconds << " s\n";
    for (const auto& p : result.predictors) {
      std::cout << "  " << p.name;
      if (!p.unavailable.empty()) {
        std::cout << ": not scored (" << p.unavailable << ")\n";
        continue;
      }
      std::cout << ": rmse_macro " << p.metrics.rmse_macro << ", rmse_pooled " << p.metrics.rmse_pooled;
      for (const auto& [b, s] : p.skill) {
        std::cout << ", " << runners::baseline_key(b) << " " << s;
      }
      std::cout << "\n";
    }
    std::cout << "  bootstrap units: n = " << result.resampling_units << "\n";
    for (const auto& w : result.warnings) {
      std::cerr << "wbaudit evaluate: warning: " << w << "\n";
    }
    if (!result.cohort_verdict.empty()) {
      std::cout << "cohort: " << result.cohort_verdict << "\n";
    }
    std::cout << runners::gate_summary(result) << "report: " << (dir / "report.html").string() << "\n";
    if (args->check) {
      const int status = runners::gate_check_status(result);
      std::cout << "check: "
                << (status == runners::kCheckPass ? "every gate passes"
                    : status == runners::kCheckRetrospectivePass
                        ? "every gate passes, under a retrospective analysis (exit 5)"
                    : status == runners::kCheckFail ? "a gate fails (exit 3)"
                    : result.gates.empty()          ? "no gate declared: nothing checked (exit 4)"
                                                    : "a gate is inconclusive (exit 4)")
                << "\n";
      if (status != runners::kCheckPass) {
        throw ExitStatus{status};
      }
    }
  });
}

namespace {
[[maybe_unused]] const bool registered = register_command(100, add_evaluate_command);
}  // namespace

}  // namespace wbaudit::cli
