#include "runners/exec/sweep_run.hpp"

#include <fnmatch.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "forecast/crossing.hpp"
#include "runners/store/extend.hpp"
#include "runners/store/identity.hpp"
#include "runners/store/lock.hpp"
#include "sim/run.hpp"
#include "sim/trace/trace.hpp"
#include "util/files.hpp"
#include "util/text.hpp"

namespace wbaudit::runners {
namespace {

// Removes a directory this run made for its lock when nothing else was written into it (a creation that failed).
void remove_if_only_lock(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename() != ".lock") {
      return;
    }
  }
  std::filesystem::remove(dir / ".lock", ec);
  std::filesystem::remove(dir, ec);
}

// Progress on stderr: one line per finished cell with done/total, rate and ETA (per rank under MPI).
class ProgressPrinter {
 public:
  ProgressPrinter(std::size_t total, int rank, int ranks) : m_total(total), m_rank(rank), m_ranks(ranks) {}
  void operator()(const ProgressEvent& event) {
    if (event.kind == ProgressEvent::Kind::started) {
      return;
    }
    ++m_done;
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
    double rate = m_done / std::max(elapsed, 1e-9);
    // Every rank runs about total/ranks cells.
    double remaining = std::max(0.0, static_cast<double>(m_total) / m_ranks - static_cast<double>(m_done));
    std::ostringstream line;
    if (m_ranks > 1) {
      line << "[rank " << m_rank << "] ";
    }
    line << "[" << m_done << (m_ranks > 1 ? " here" : "") << "/" << m_total << "] "
         << (event.kind == ProgressEvent::Kind::failed ? "FAILED " : "") << event.name << " (" << std::fixed
         << std::setprecision(1) << event.seconds << "s)  " << std::setprecision(2) << rate * 60 << " cells/min, ETA "
         << util::format_duration(remaining / std::max(rate, 1e-9));
    if (event.kind == ProgressEvent::Kind::failed) {
      line << "\n    reason: " << event.message;
    }
    std::cerr << line.str() << "\n" << std::flush;
  }

 private:
  std::size_t m_total;
  int m_rank, m_ranks;
  std::size_t m_done = 0;
  std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
};

// The end of a run whose target cells erased early (docs/specs.md "The early-crossing warning"): the details, one line
// per cell, in DIR/early_crossings.txt, and one line on stderr (also with -q) with the count, the first cell and the
// remedy. A larger learning rate moves more weights off their format's grid: raising optimizer.lr_scale delays the
// crossing (e4m3 on examples/tiny.toml: at lr_scale 0.125 above the threshold from initialization, at 8 it crosses
// after the burn-in; tested in tests/runners/run_cli_test.sh).
void report_early_crossings(const std::filesystem::path& dir, const std::vector<std::string>& warnings,
                            std::size_t targets) {
  std::vector<std::string> sorted = warnings;
  std::sort(sorted.begin(), sorted.end());
  const std::filesystem::path file = dir / "early_crossings.txt";
  util::write_atomic(file, util::join(sorted, "\n") + "\n", /*durable=*/false);
  std::cerr << "wbaudit run: warning: " << sorted.size() << " of " << targets
            << " target runs erase at or above the threshold by the burn-in or within their first "
            << kEarlyRecordedSteps << " recorded steps, which leaves little to forecast (the first: "
            << sorted.front().substr(0, sorted.front().find(':')) << "; each in " << file.string()
            << "): raise optimizer.lr_scale (larger updates are erased less), raise the weights' scale (weights below "
               "the format's min normal erase most updates), or record more early steps (docs/specs.md)\n"
            << std::flush;
}

}  // namespace

std::vector<StoredCell> stored_cells(const SweepSpec& spec) {
  std::vector<StoredCell> cells;
  for (auto& c : spec.cells) {
    cells.push_back({"", c.name, role_name(c.role), c.reference, c.config});
  }
  return cells;
}

void check_sweep_directory(const std::filesystem::path& dir, const SweepSpec& spec, bool resume, bool extend) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (extend) {
    if (!fs::exists(dir / "sweep.json", ec)) {
      throw StoreError("--extend: " + dir.string() +
                       " is not a sweep (no sweep.json); run without --extend to create it");
    }
    (void)SweepStore::open(dir);
    return;
  }
  if (!fs::exists(dir, ec)) {
    return;
  }
  if (!fs::exists(dir / "sweep.json")) {
    // A creation interrupted before sweep.json leaves only what the store writes first (cells/, spec.toml, bin/,
    // temporaries); the store resumes it. Anything else is someone else's directory.
    if (!fs::is_directory(dir, ec)) {
      throw StoreError(dir.string() + " exists and is not a directory; choose a new --out");
    }
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name != "cells" && name != "bin" && name != "spec.toml" && name.front() != '.') {
        throw StoreError(dir.string() + " exists and is not a sweep directory (no sweep.json, and it holds " + name +
                         "); choose a new --out");
      }
    }
    return;
  }
  const SweepStore store = SweepStore::open(dir);
  const std::string hash = sha256_hex(spec.text);
  if (store.spec_sha256() != hash) {
    throw StoreError("sweep directory " + dir.string() +
                     " was created by another spec (the spec changed since: its frozen " + store.spec_path().string() +
                     " has hash " + store.spec_sha256() + ", " + spec.path.string() + " has hash " + hash +
                     "); choose a new --out for this spec (--resume continues a sweep only "
                     "with the spec that created it; --extend adds the cells of a spec that only adds cells: more "
                     "seeds, grid values or formats)");
  }
  if (!resume) {
    throw StoreError("sweep directory " + dir.string() + " already exists for this spec; use --resume to continue it");
  }
}

CellFn simulator_cell_fn() {
  return [](const CellTask& task, const std::filesystem::path& attempt_dir) -> std::vector<std::string> {
    sim::RunConfig config = sim::run_config_from_json(task.config);
    // Streamed (docs/trace-format.md, "Streaming"): each recorded step is on disk in trace.h5.partial as it is
    // recorded; trace.h5 appears, byte for byte the file write_trace would write, when the run completes.
    sim::run_cell_to_file(config, attempt_dir / "trace.h5");
    return {"trace.h5"};
  };
}

void check_cells_fit(const SweepSpec& spec, int beside, int threads, double physical) {
  if (!(physical > 0)) {
    return;
  }
  const auto gib = [](double bytes) {
    std::ostringstream out;
    out << std::fixed << std::setprecision(bytes < 1073741824.0 ? 3 : 1) << bytes / 1073741824.0 << " GiB";
    return out.str();
  };
  for (const auto& cell : spec.cells) {
    double training = 0, recording = 0;
    try {
      const sim::RunConfig config = sim::run_config_from_json(cell.config);
      training = sim::estimate_cell_bytes(config);
      recording = sim::estimate_recording_bytes(config, threads);
    } catch (const std::exception&) {
      continue;  // its own validation names the problem
    }
    const double bytes = training + recording;
    if (bytes * beside > physical) {
      std::ostringstream msg;
      msg << "cell " << cell.name << " needs about " << gib(bytes) << " (" << std::setprecision(0) << std::fixed
          << bytes << " bytes: training " << training << ", recording and writing its trace " << recording << ")"
          << (beside > 1 ? " x " + std::to_string(beside) + " cells at a time" : std::string())
          << ", more than this machine's " << gib(physical) << " (" << physical
          << " bytes) of memory; shrink [model] or [data] batch, or record fewer steps"
          << (beside > 1 ? ", or run fewer --jobs" : "");
      throw SpecError(msg.str());
    }
  }
}

namespace {

// --extend with the lock held: the sweep extended by the cells the spec adds, saying what was added and kept.
std::vector<std::string> extend_sweep(const SweepSpec& spec, const std::filesystem::path& out) {
  const SweepStore store = SweepStore::open(out);
  if (store.spec_sha256() == sha256_hex(spec.text)) {
    return {"--extend: " + out.string() + " already has this spec; running what it lacks, as --resume"};
  }
  ExtensionPlan plan = plan_extension(store.cells(), stored_cells(spec));
  if (plan.added.empty()) {
    throw StoreError("--extend: " + spec.path.string() + " adds no cells to " + out.string() +
                     " (every cell it names is already there); an extension only adds cells, so a spec that "
                     "changes nothing else cannot be frozen in its place");
  }
  store.extend(spec.text, plan.added, plan.renamed);
  std::size_t targets = 0;
  for (const auto& cell : plan.added) {
    targets += cell.role == "target" ? 1 : 0;
  }
  std::vector<std::string> notes{"extended " + out.string() + " by " + std::to_string(plan.added.size()) + " cells (" +
                                 std::to_string(targets) + " targets, " + std::to_string(plan.added.size() - targets) +
                                 " references); the " + std::to_string(store.cells().size()) +
                                 " existing cells are kept as they are; the extension is in the journal"};
  notes.insert(notes.end(), plan.notes.begin(), plan.notes.end());
  return notes;
}

}  // namespace

LockedSweep create_locked(const SweepSpec& spec, const std::filesystem::path& out, bool resume, bool extend) {
  check_sweep_directory(out, spec, resume, extend);
  if (extend) {
    SweepLock lock = SweepLock::acquire(out);
    std::vector<std::string> notes = extend_sweep(spec, out);
    CreateOptions create;
    create.resume = true;
    SweepStore store = SweepStore::create(out, spec.text, stored_cells(spec), create);
    return LockedSweep{std::move(lock), std::move(store), std::move(notes)};
  }
  // The lock before anything is written: two runs into one new directory must not both create a sweep (and a key
  // and a journal) there. The directory is made for the lock; a creation that fails removes it again.
  std::error_code ec;
  const bool made = std::filesystem::create_directories(out, ec);
  if (ec) {
    throw StoreError("cannot create " + out.string() + ": " + ec.message());
  }
  try {
    SweepLock lock = SweepLock::acquire(out);
    check_sweep_directory(out, spec, resume);  // again, now that no one else can write
    CreateOptions create;
    create.resume = resume;
    SweepStore store = SweepStore::create(out, spec.text, stored_cells(spec), create);
    return LockedSweep{std::move(lock), std::move(store), {}};
  } catch (...) {
    if (made) {
      remove_if_only_lock(out);
    }
    throw;
  }
}

std::vector<std::string> remove_created_sweep(LockedSweep& locked, bool keep_directory) {
  namespace fs = std::filesystem;
  const fs::path dir = locked.store.dir();
  const fs::path key = locked.store.key_path();
  std::vector<fs::path> targets;
  if (keep_directory) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      targets.push_back(entry.path());
    }
    std::sort(targets.begin(), targets.end());
  } else {
    targets.push_back(dir);
  }
  if (!key.empty()) {
    targets.push_back(key);
    targets.emplace_back(key.string() + ".heads");
  }
  std::vector<std::string> removed;
  for (const auto& target : targets) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(target, ec))) {
      continue;
    }
    fs::remove_all(target, ec);  // links inside are removed, never followed
    removed.push_back(ec ? target.string() + " (not removed: " + ec.message() + ")" : target.string());
  }
  return removed;
}

namespace {

// The ids of the cells --cells selects, checked before anything is written: a pattern that matches no cell is an
// error naming the sweep's cells.
std::vector<std::string> selected_cell_ids(const SweepSpec& spec, const std::vector<std::string>& patterns) {
  std::vector<std::string> only_ids;
  for (const auto& pattern : patterns) {
    bool matched = false;
    for (const auto& cell : spec.cells) {
      if (::fnmatch(pattern.c_str(), cell.name.c_str(), 0) != 0) {
        continue;
      }
      matched = true;
      const std::string id = cell_id(cell.config);
      if (std::find(only_ids.begin(), only_ids.end(), id) == only_ids.end()) {
        only_ids.push_back(id);
      }
    }
    if (!matched) {
      std::vector<std::string> names;
      for (const auto& cell : spec.cells) {
        names.push_back(cell.name);
      }
      throw SpecError(spec.path.string() + ": --cells \"" + pattern +
                      "\" matches no cell of the sweep (its cells: " + util::join(names) + ")");
    }
  }
  return only_ids;
}

// Refuse before anything is written a cell that cannot fit in this machine's memory with the cells that run beside
// it (local worker processes; one cell per rank under MPI).
void check_memory(const SweepSpec& spec, const RunOptions& options, MPI_Comm comm) {
  const double physical = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  const int beside = comm == MPI_COMM_NULL ? std::max(1, options.jobs) : 1;
  const int threads = comm == MPI_COMM_NULL && options.jobs > 1
                          ? std::max(1, options.worker_threads)
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  check_cells_fit(spec, beside, threads, physical);
}

// Rank 0 creates (or checks) the sweep directory and takes its lock for the whole run (one writer per sweep: a
// second run refuses, naming the holder); every rank learns whether that worked. Returns the lock (rank 0 only).
std::optional<SweepLock> create_sweep(const SweepSpec& spec, const RunOptions& options, MPI_Comm comm, int rank) {
  std::string create_error;
  std::optional<SweepLock> lock;
  if (rank == 0) {
    try {
      LockedSweep locked = create_locked(spec, options.out, options.resume, options.extend);
      lock.emplace(std::move(locked.lock));
      const SweepStore& created = locked.store;
      // With the lock held: attempt directories the journal never heard of are moved aside (DIR/foreign/), so
      // they cannot sit beside canonical attempts; repairs of the frozen inputs are said.
      std::vector<std::string> notes = locked.notes;
      notes.insert(notes.end(), created.repairs().begin(), created.repairs().end());
      for (auto& moved : created.set_aside_foreign()) {
        notes.push_back(std::move(moved));
      }
      for (auto& removed : created.remove_leftover_temporaries()) {
        notes.push_back(std::move(removed));
      }
      for (const auto& note : notes) {
        std::cerr << "wbaudit run: " << note << "\n";
      }
    } catch (const std::exception& e) {
      create_error = e.what();
    }
  }
  if (comm != MPI_COMM_NULL) {
    int failed = create_error.empty() ? 0 : 1;
    MPI_Bcast(&failed, 1, MPI_INT, 0, comm);
    if (failed) {
      throw StoreError(rank == 0 ? create_error : "rank 0 could not create the sweep directory");
    }
  } else if (!create_error.empty()) {
    throw StoreError(create_error);
  }
  return lock;
}

// The early-crossing warnings (docs/specs.md) of completed target cells, collected as they complete.
class EarlyCrossings {
 public:
  EarlyCrossings(const SweepSpec& spec, const SweepStore& store, std::filesystem::path out)
      : m_spec(spec), m_out(std::move(out)), m_burn_in(crossing_burn_in(spec).steps) {
    for (const auto& cell : store.cells()) {
      if (cell.role == "target") {
        m_target_ids.insert(cell.id);
      }
    }
  }

  void operator()(const ProgressEvent& e) {
    if (e.kind != ProgressEvent::Kind::completed || !m_target_ids.count(e.cell_id) || e.attempt.empty()) {
      return;
    }
    std::string warning;
    try {
      const sim::Trace trace = sim::read_trace(m_out / "cells" / e.cell_id / "attempts" / e.attempt / "trace.h5");
      warning = early_crossing_warning(e.name, trace, m_spec.evaluation.groups, m_spec.evaluation.threshold,
                                       m_spec.evaluation.min_group_size, m_burn_in);
    } catch (const std::exception&) {
      return;  // the store's checks name an unreadable trace; a warning is no place for it
    }
    if (!warning.empty()) {
      const std::lock_guard<std::mutex> guard(m_mutex);
      m_warnings.push_back(std::move(warning));
    }
  }

  // The run ends with one line and the details in a file (rank 0).
  void report() const {
    if (!m_warnings.empty()) {
      report_early_crossings(m_out, m_warnings, m_spec.count(CellRole::target));
    }
  }

 private:
  const SweepSpec& m_spec;
  std::filesystem::path m_out;
  std::int64_t m_burn_in;
  std::set<std::string> m_target_ids;
  std::vector<std::string> m_warnings;
  std::mutex m_mutex;
};

void print_run_header(const SweepSpec& spec, const RunOptions& options, MPI_Comm comm) {
  std::cerr << "wbaudit run: " << spec.name << ": " << spec.count(CellRole::target) << " target runs, "
            << spec.count(CellRole::reference) << " fp32 reference runs -> " << options.out.string();
  if (comm == MPI_COMM_NULL && options.jobs > 1) {
    std::cerr << " (up to " << options.jobs << " worker processes, " << options.worker_threads << " thread"
              << (options.worker_threads == 1 ? "" : "s") << " each)";
  }
  std::cerr << "\n";
}

}  // namespace

ExecSummary run_sweep(const SweepSpec& spec, const RunOptions& options, MPI_Comm comm) {
  int rank = 0, ranks = 1;
  if (comm != MPI_COMM_NULL) {
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
  }
  const std::vector<std::string> only_ids = selected_cell_ids(spec, options.only);
  check_memory(spec, options, comm);
  const std::optional<SweepLock> lock = create_sweep(spec, options, comm, rank);
  SweepStore store = SweepStore::open(options.out);

  ExecOptions exec;
  exec.resume = true;  // the directory was just created (or resume was asked for and checked by create)
  exec.comm = comm;
  if (comm == MPI_COMM_NULL) {
    exec.local_jobs = options.jobs;
    exec.worker_command = {self_executable().string(), "worker",
                           "--kokkos-threads=" + std::to_string(options.worker_threads), "--", options.out.string()};
  }
  ProgressPrinter printer(store.cells().size(), rank, ranks);
  EarlyCrossings early(spec, store, options.out);
  exec.progress = [&](const ProgressEvent& e) {
    if (options.progress) {
      printer(e);
    }
    early(e);
  };
  if (options.progress && rank == 0) {
    print_run_header(spec, options, comm);
  }
  if (options.create_only) {
    if (options.progress && rank == 0) {
      std::cerr << "wbaudit run: created " << options.out.string() << " (" << store.cells().size()
                << " cells, none run: --create-only)\n";
    }
    return ExecSummary{};
  }
  ExecSummary summary = execute_sweep(store, options.only.empty() ? tasks_of(store) : tasks_of(store, only_ids),
                                      simulator_cell_fn(), exec);
  if (rank == 0) {
    early.report();
  }
  return summary;
}

std::string early_crossing_warning(const std::string& cell_name, const sim::Trace& target,
                                   const std::vector<std::string>& groups, double threshold,
                                   std::int64_t min_group_size, std::int64_t burn_in) {
  std::ostringstream found;
  int count = 0;
  for (const auto& g : target.groups) {
    if (groups.empty() ? g.size < min_group_size : std::find(groups.begin(), groups.end(), g.name) == groups.end()) {
      continue;
    }
    for (std::size_t t = 0; t < target.recorded_steps.size() && t < g.erased_fraction.size(); ++t) {
      if (t >= kEarlyRecordedSteps && target.recorded_steps[t] > burn_in) {
        break;
      }
      if (!(g.erased_fraction[t] >= threshold)) {
        continue;  // NaN (no proposal) is not a crossing
      }
      found << (count++ ? ", " : "") << g.name << " " << std::setprecision(3) << g.erased_fraction[t] << " at step "
            << target.recorded_steps[t];
      break;
    }
  }
  if (count == 0) {
    return {};
  }
  std::ostringstream out;
  out << cell_name << ": erased fraction at or above the threshold " << threshold << " by the burn-in (step " << burn_in
      << ") or within the first " << kEarlyRecordedSteps << " recorded steps (" << found.str()
      << "): above the threshold at initialization or crossing before its trajectory is resolved, which leaves "
         "little to forecast";
  return out.str();
}

}  // namespace wbaudit::runners
