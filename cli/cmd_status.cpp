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
namespace {

struct StatusArgs {
  std::string dir;
  bool all_cells = false;
  bool json = false;
  bool check = false;
  bool no_scheduler = false;
};

// Everything `status` reports about a sweep, gathered before anything is printed.
// NOLINTNEXTLINE(bugprone-exception-escape): implicit members of nlohmann::json members, as for any value type
struct SweepReport {
  std::vector<runners::CellStatus> statuses;
  std::vector<std::string> frozen;  // problems with spec.toml, bin/wbaudit, bin/lib/
  std::vector<std::string> record;  // edited journal or sweep.json (empty without the key)
  std::size_t foreign = 0;
  std::map<runners::CellState, std::size_t> counts;
  nlohmann::json scheduler;
  std::vector<runners::Deviation> deviations;
  std::string deviation_error;
  std::vector<runners::Registration> registrations;
  std::vector<std::string> other_problems;
  std::vector<std::string> signature_problems;

  std::size_t count(runners::CellState state) const {
    const auto it = counts.find(state);
    return it == counts.end() ? 0 : it->second;
  }
};

// Whatever else contradicts the sweep's record: links inside it, directories of cells it does not have,
// registrations the journal records that are gone, derived outputs edited since wbaudit wrote them.
std::vector<std::string> other_problems(const runners::SweepStore& store,
                                        const std::vector<runners::CellStatus>& statuses) {
  std::vector<std::string> problems = store.link_problems();
  for (const auto& dir : store.unknown_cell_directories()) {
    problems.push_back(dir + " is not a cell of this sweep (made by hand or copied in)");
  }
  for (auto& p : runners::missing_registrations(store)) {
    problems.push_back(std::move(p));
  }
  for (auto& p : store.output_problems()) {
    problems.push_back(std::move(p));
  }
  for (auto& p : store.numeric_problems(statuses)) {  // issue 30: a cell that ran under another numeric contract
    problems.push_back(std::move(p));
  }
  return problems;
}

// Edited or hand-made registrations and deviations (signed by the sweep's key, runners/store/registry.hpp).
std::vector<std::string> signature_problems(const std::vector<runners::Registration>& registrations,
                                            const std::vector<runners::Deviation>& deviations) {
  std::vector<std::string> problems;
  for (const auto& r : registrations) {
    if (!r.signature_problem.empty()) {
      problems.push_back("registration " + r.sha256.substr(0, 12) + ": " + r.signature_problem);
    }
  }
  for (const auto& d : deviations) {
    if (!d.signature_problem.empty()) {
      problems.push_back("deviation log line " + std::to_string(d.line) + ": " + d.signature_problem);
    }
  }
  return problems;
}

SweepReport gather_report(const runners::SweepStore& store, bool query_scheduler) {
  SweepReport report;
  report.statuses = store.status();
  report.frozen = store.check_frozen_inputs();
  report.record = store.check_record();
  for (const auto& s : report.statuses) {
    ++report.counts[s.state];
    report.foreign += s.foreign.size();
  }
  report.scheduler = query_scheduler ? runners::slurm::scheduler_view(store.dir())
                                     : nlohmann::json{{"available", false}, {"message", "not queried"}};
  try {
    report.deviations = runners::read_deviations(store.dir(), &store);
  } catch (const std::exception& e) {
    report.deviation_error = e.what();
  }
  report.registrations = runners::registrations(store.dir(), &store);
  report.other_problems = other_problems(store, report.statuses);
  report.signature_problems = signature_problems(report.registrations, report.deviations);
  return report;
}

nlohmann::json cells_json(const std::vector<runners::CellStatus>& statuses) {
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
  return cells;
}

void print_json(const runners::SweepStore& store, const SweepReport& report) {
  nlohmann::json out = {{"sweep", store.dir().string()},
                        {"spec_sha256", store.spec_sha256()},
                        {"binary_sha256", store.binary_sha256()},
                        {"frozen_input_problems", report.frozen},
                        {"verifiable", store.can_verify()},
                        {"key_problem", store.key_problem()},
                        {"record_problems", report.record},
                        {"journal_torn_tail", store.journal_torn_tail()},
                        {"scheduler", report.scheduler},
                        {"deviations", report.deviations.size()},
                        {"registrations", report.registrations.size()},
                        {"signature_problems", report.signature_problems},
                        {"other_problems", report.other_problems}};
  if (!report.deviation_error.empty()) {
    out["deviation_log_error"] = report.deviation_error;
  }
  out["cells"] = cells_json(report.statuses);
  nlohmann::json totals = nlohmann::json::object();
  for (auto state : {runners::CellState::done, runners::CellState::noncanonical, runners::CellState::running,
                     runners::CellState::failed, runners::CellState::pending}) {
    totals[runners::to_string(state)] = report.count(state);
  }
  out["counts"] = totals;
  std::cout << out.dump(1) << "\n";
}

// The sweep's identity and the integrity of its frozen inputs, key and journal.
void print_integrity(const runners::SweepStore& store, const SweepReport& report) {
  std::cout << "sweep    " << store.dir().string() << " (created " << store.created() << ")\n"
            << "spec     sha256 " << store.spec_sha256() << "\n"
            << "binary   sha256 " << store.binary_sha256() << "\n";
  if (report.frozen.empty()) {
    const std::size_t n = store.libraries().size();
    std::cout << "frozen   spec.toml and bin/wbaudit"
              << (n == 0 ? std::string()
                         : " and its " + std::to_string(n) + (n == 1 ? " library" : " libraries") + " in bin/lib/")
              << " intact\n";
  }
  for (const auto& p : report.frozen) {
    std::cout << "PROBLEM  " << p << "\n";
  }
  if (store.can_verify()) {
    std::cout << "signed   journal " << store.journal_path().string() << ", key found; every attempt checked\n";
  } else {
    std::cout << "PROBLEM  attempts cannot be verified (none counts as canonical): " << store.key_problem() << "\n";
  }
  for (const auto& p : report.record) {
    std::cout << "PROBLEM  " << p << "\n";
  }
  if (store.journal_torn_tail()) {
    std::cout << "note     the journal ends in a torn line (a runner was killed while appending; the next run "
                 "drops it)\n";
  }
  if (report.foreign > 0) {
    std::cout << "PROBLEM  " << report.foreign << " foreign attempt director" << (report.foreign == 1 ? "y" : "ies")
              << " (not in the journal: made by hand or copied in; `run --resume` moves them to foreign/)\n";
  }
}

void print_cells(const SweepReport& report, bool all_cells) {
  std::cout << "cells    " << report.statuses.size() << ": " << report.count(runners::CellState::done) << " done, "
            << report.count(runners::CellState::noncanonical) << " non-canonical, "
            << report.count(runners::CellState::running) << " running, " << report.count(runners::CellState::failed)
            << " failed, " << report.count(runners::CellState::pending) << " pending\n";
  for (const auto& s : report.statuses) {
    if (s.state == runners::CellState::done && !all_cells && s.reasons.empty()) {
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
}

// Registrations, deviations and the problems of the sweep's other records.
void print_records(const runners::SweepStore& store, const SweepReport& report) {
  for (const auto& r : report.registrations) {
    std::cout << "analysis " << r.sha256.substr(0, 12) << " registered " << r.registered << " by " << r.who
              << (r.retrospective ? " (retrospective)" : "") << ", " << r.outcome_cells.size() << " outcome cells\n";
  }
  if (!report.deviations.empty()) {
    std::cout << "deviations " << report.deviations.size() << " (analyses run under them are retrospective)\n";
  }
  if (!report.deviation_error.empty()) {
    std::cout << "PROBLEM  " << report.deviation_error << "\n";
  }
  for (const auto& p : report.other_problems) {
    std::cout << "PROBLEM  " << p << "\n";
  }
  if (store.can_verify()) {  // without the key every attempt is already said to be unverifiable
    for (const auto& p : report.signature_problems) {
      std::cout << "PROBLEM  " << p << "\n";
    }
  }
}

void print_scheduler(const nlohmann::json& scheduler) {
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

void print_text(const runners::SweepStore& store, const SweepReport& report, bool all_cells) {
  print_integrity(store, report);
  print_cells(report, all_cells);
  print_records(store, report);
  print_scheduler(report.scheduler);
}

// What `status --check` requires: every cell done and canonical, and nothing in the sweep contradicting its record.
bool sweep_is_sound(const runners::SweepStore& store, const SweepReport& report) {
  return report.count(runners::CellState::done) == report.statuses.size() && report.frozen.empty() &&
         report.record.empty() && report.foreign == 0 && store.can_verify() && report.signature_problems.empty() &&
         report.deviation_error.empty() && report.other_problems.empty();
}

void show_status(const StatusArgs& args) {
  const auto store = runners::SweepStore::open(args.dir);
  const SweepReport report = gather_report(store, !args.no_scheduler);
  if (args.json) {
    print_json(store, report);
  } else {
    print_text(store, report, args.all_cells);
  }
  if (args.check && !sweep_is_sound(store, report)) {
    throw ExitStatus{2};
  }
}

}  // namespace

void add_status_command(CLI::App& app) {
  auto args = std::make_shared<StatusArgs>();
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
  cmd->callback([args] { show_status(*args); });
}

namespace {
[[maybe_unused]] const bool registered = register_command(20, add_status_command);
}  // namespace

}  // namespace wbaudit::cli
