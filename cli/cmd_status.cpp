// wbaudit status DIR: per-cell progress, failures, and whether each completed cell is canonical, decided from the
// sweep directory's content; the scheduler's view (squeue/sacct) is shown beside it, never trusted for completion.
#include <iomanip>
#include <iostream>
#include <map>

#include "cli/commands.hpp"
#include "runners/exec/slurm/submit.hpp"
#include "runners/store/registry.hpp"
#include "runners/store/store.hpp"

namespace wbaudit::cli {

void add_status_command(CLI::App& app) {
  struct Args {
    std::string dir;
    bool all_cells = false;
    bool json = false;
    bool check = false;
    bool no_scheduler = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("status",
                                 "Per-cell progress of a sweep directory: done / running / failed / "
                                 "pending, attempts, and whether each completed cell is canonical");
  cmd->add_option("dir", args->dir, "Sweep directory")->required()->check(CLI::ExistingDirectory);
  cmd->add_flag("--cells", args->all_cells, "List every cell (default: only cells that are not done)");
  cmd->add_flag("--json", args->json, "Machine-readable output");
  cmd->add_flag("--check", args->check,
                "Exit 2 unless every cell is done and canonical (signed and journaled), no foreign attempt directory "
                "sits beside them, and the frozen spec, binary, journal, sweep.json, registrations, deviation log and "
                "derived outputs (summary.csv, report/) are intact, with no symbolic link inside the sweep");
  cmd->add_flag("--no-scheduler", args->no_scheduler, "Do not query squeue/sacct");
  cmd->footer(
      "States: done (a canonical complete attempt), noncanonical (an attempt claims completion or was made\n"
      "outside the pipeline, but fails the checks: signed by the sweep's key, recorded in its journal,\n"
      "registered spec, registered binary, file hashes; without the key nothing can be verified), running,\n"
      "failed (including attempts whose process is gone), pending (no attempt).\n"
      "Example: wbaudit status runs/tiny --cells");
  cmd->callback([args] {
    const auto store = runners::SweepStore::open(args->dir);
    const auto statuses = store.status();
    const auto frozen = store.check_frozen_inputs();
    const auto record = store.check_record();  // edited journal or sweep.json (empty without the key)
    std::size_t foreign = 0;
    std::map<runners::CellState, std::size_t> counts;
    for (const auto& s : statuses) {
      ++counts[s.state];
      foreign += s.foreign.size();
    }
    nlohmann::json scheduler = args->no_scheduler ? nlohmann::json{{"available", false}, {"message", "not queried"}}
                                                  : runners::slurm::scheduler_view(store.dir());
    std::vector<runners::Deviation> deviations;
    std::string deviation_error;
    try {
      deviations = runners::read_deviations(store.dir(), &store);
    } catch (const std::exception& e) {
      deviation_error = e.what();
    }
    const auto registrations = runners::registrations(store.dir(), &store);
    // Whatever else contradicts the sweep's record: links inside it, directories of cells it does not have,
    // registrations the journal records that are gone, derived outputs edited since wbaudit wrote them.
    std::vector<std::string> other_problems = store.link_problems();
    for (const auto& dir : store.unknown_cell_directories()) {
      other_problems.push_back(dir + " is not a cell of this sweep (made by hand or copied in)");
    }
    for (auto& p : runners::missing_registrations(store)) {
      other_problems.push_back(std::move(p));
    }
    for (auto& p : store.output_problems()) {
      other_problems.push_back(std::move(p));
    }
    for (auto& p : store.numeric_problems(statuses)) {  // issue 30: a cell that ran under another numeric contract
      other_problems.push_back(std::move(p));
    }
    // Edited or hand-made registrations and deviations (signed by the sweep's key, runners/store/registry.hpp).
    std::vector<std::string> signature_problems;
    for (const auto& r : registrations) {
      if (!r.signature_problem.empty()) {
        signature_problems.push_back("registration " + r.sha256.substr(0, 12) + ": " + r.signature_problem);
      }
    }
    for (const auto& d : deviations) {
      if (!d.signature_problem.empty()) {
        signature_problems.push_back("deviation log line " + std::to_string(d.line) + ": " + d.signature_problem);
      }
    }

    if (args->json) {
      nlohmann::json out = {{"sweep", store.dir().string()},
                            {"spec_sha256", store.spec_sha256()},
                            {"binary_sha256", store.binary_sha256()},
                            {"frozen_input_problems", frozen},
                            {"verifiable", store.can_verify()},
                            {"key_problem", store.key_problem()},
                            {"record_problems", record},
                            {"journal_torn_tail", store.journal_torn_tail()},
                            {"scheduler", scheduler},
                            {"deviations", deviations.size()},
                            {"registrations", registrations.size()},
                            {"signature_problems", signature_problems},
                            {"other_problems", other_problems}};
      if (!deviation_error.empty()) {
        out["deviation_log_error"] = deviation_error;
      }
      nlohmann::json cells = nlohmann::json::array();
      for (const auto& s : statuses) {
        nlohmann::json attempts = nlohmann::json::array();
        for (const auto& a : s.attempts) {
          attempts.push_back({{"uuid", a.uuid},
                              {"status", runners::to_string(a.status)},
                              {"complete", a.complete},
                              {"canonical", a.canonical},
                              {"start", a.start},
                              {"end", a.end},
                              {"exit_reason", a.exit_reason},
                              {"reasons", a.reasons}});
        }
        cells.push_back({{"id", s.cell->id},
                         {"name", s.cell->name},
                         {"role", s.cell->role},
                         {"state", runners::to_string(s.state)},
                         {"reasons", s.reasons},
                         {"foreign_attempts", s.foreign},
                         {"attempts", attempts}});
      }
      out["cells"] = cells;
      nlohmann::json totals = nlohmann::json::object();
      for (auto state : {runners::CellState::done, runners::CellState::noncanonical, runners::CellState::running,
                         runners::CellState::failed, runners::CellState::pending}) {
        totals[runners::to_string(state)] = counts[state];
      }
      out["counts"] = totals;
      std::cout << out.dump(1) << "\n";
    } else {
      std::cout << "sweep    " << store.dir().string() << " (created " << store.created() << ")\n"
                << "spec     sha256 " << store.spec_sha256() << "\n"
                << "binary   sha256 " << store.binary_sha256() << "\n";
      if (frozen.empty()) {
        const std::size_t n = store.libraries().size();
        std::cout << "frozen   spec.toml and bin/wbaudit"
                  << (n == 0 ? std::string()
                             : " and its " + std::to_string(n) + (n == 1 ? " library" : " libraries") + " in bin/lib/")
                  << " intact\n";
      }
      for (const auto& p : frozen) {
        std::cout << "PROBLEM  " << p << "\n";
      }
      if (store.can_verify()) {
        std::cout << "signed   journal " << store.journal_path().string() << ", key found; every attempt checked\n";
      } else {
        std::cout << "PROBLEM  attempts cannot be verified (none counts as canonical): " << store.key_problem() << "\n";
      }
      for (const auto& p : record) {
        std::cout << "PROBLEM  " << p << "\n";
      }
      if (store.journal_torn_tail()) {
        std::cout << "note     the journal ends in a torn line (a runner was killed while appending; the next run "
                     "drops it)\n";
      }
      if (foreign > 0) {
        std::cout << "PROBLEM  " << foreign << " foreign attempt director" << (foreign == 1 ? "y" : "ies")
                  << " (not in the journal: made by hand or copied in; `run --resume` moves them to foreign/)\n";
      }
      std::cout << "cells    " << statuses.size() << ": " << counts[runners::CellState::done] << " done, "
                << counts[runners::CellState::noncanonical] << " non-canonical, " << counts[runners::CellState::running]
                << " running, " << counts[runners::CellState::failed] << " failed, "
                << counts[runners::CellState::pending] << " pending\n";
      for (const auto& s : statuses) {
        if (s.state == runners::CellState::done && !args->all_cells && s.reasons.empty()) {
          continue;
        }
        std::cout << "  " << std::left << std::setw(13) << runners::to_string(s.state) << s.cell->name << "  "
                  << s.cell->id.substr(0, 12) << "  attempts " << s.attempts.size();
        if (s.canonical_attempt) {
          std::cout << "  canonical " << s.attempts[*s.canonical_attempt].uuid;
        }
        std::cout << "\n";
        for (const auto& r : s.reasons) {
          std::cout << "      " << r << "\n";
        }
      }
      for (const auto& r : registrations) {
        std::cout << "analysis " << r.sha256.substr(0, 12) << " registered " << r.registered << " by " << r.who
                  << (r.retrospective ? " (retrospective)" : "") << ", " << r.outcome_cells.size()
                  << " outcome cells\n";
      }
      if (!deviations.empty()) {
        std::cout << "deviations " << deviations.size() << " (analyses run under them are retrospective)\n";
      }
      if (!deviation_error.empty()) {
        std::cout << "PROBLEM  " << deviation_error << "\n";
      }
      for (const auto& p : other_problems) {
        std::cout << "PROBLEM  " << p << "\n";
      }
      if (store.can_verify()) {  // without the key every attempt is already said to be unverifiable
        for (const auto& p : signature_problems) {
          std::cout << "PROBLEM  " << p << "\n";
        }
      }
      if (scheduler.value("available", false)) {
        std::cout << "scheduler (informational; completion is decided from content):\n";
        if (scheduler["jobs"].empty()) {
          std::cout << "  no job of this sweep is queued or running\n";
        }
        for (const auto& j : scheduler["jobs"]) {
          std::cout << "  " << j.value("source", "") << " " << j.value("job", "") << " " << j.value("state", "") << " "
                    << j.value("reason", j.value("exit_code", "")) << "\n";
        }
      } else if (scheduler.contains("message") && scheduler["message"] != "no submissions") {
        std::cout << "scheduler: " << scheduler["message"].get<std::string>() << "\n";
      }
    }
    if (args->check &&
        (counts[runners::CellState::done] != statuses.size() || !frozen.empty() || !record.empty() || foreign > 0 ||
         !store.can_verify() || !signature_problems.empty() || !deviation_error.empty() || !other_problems.empty())) {
      throw ExitStatus{2};
    }
  });
}

namespace {
[[maybe_unused]] const bool registered = register_command(20, add_status_command);
}  // namespace

}  // namespace wbaudit::cli
