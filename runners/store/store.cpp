#include "runners/store/store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>

#include "runners/store/identity.hpp"
#include "runners/store/journal.hpp"
#include "sim/numeric_identity.hpp"
#include "sim/run.hpp"
#include "sim/trace/trace.hpp"
#include "sim/trace/trace_reader.hpp"
#include "sim/trace/trace_writer.hpp"
#include "util/files.hpp"

namespace wbaudit::runners {
namespace fs = std::filesystem;
using util::fsync_path;
using util::host_name;

struct SigningState {
  std::optional<SweepKey> key;
  std::string key_problem;
  std::mutex mutex;  // guards index (cell_status may be called from the MPI dispatcher's thread too)
  JournalIndex index;
};

namespace {

std::string read_text(const fs::path& path) {
  return read_regular_file(path);
}

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

nlohmann::json slurm_identity() {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, var] :
       {std::pair{"job_id", "SLURM_JOB_ID"}, std::pair{"array_job_id", "SLURM_ARRAY_JOB_ID"},
        std::pair{"array_task_id", "SLURM_ARRAY_TASK_ID"}, std::pair{"restart_count", "SLURM_RESTART_COUNT"},
        std::pair{"node", "SLURMD_NODENAME"}}) {
    if (auto value = env_or_empty(var); !value.empty()) {
      out[key] = value;
    }
  }
  return out;
}

// Copies the executable (or one of its libraries) into place atomically and returns the copy's hash (checked
// against the source's).
std::string freeze_executable(const fs::path& source, const std::string& source_sha256, const fs::path& target) {
  fs::create_directories(target.parent_path());
  const fs::path temp =
      target.parent_path() / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()));
  std::error_code ec;
  fs::copy_file(source, temp, fs::copy_options::overwrite_existing, ec);
  if (ec) {
    // Leave nothing behind, and say "no space left" when that is why (a full tmpfs reports EIO from the copy).
    std::error_code ignored;
    fs::remove(temp, ignored);
    std::string why = ec.message();
    const auto needed = fs::file_size(source, ignored);
    const auto space = fs::space(target.parent_path(), ignored);
    if (ec.value() == ENOSPC || (!ignored && space.available < needed)) {
      why = "no space left on device (the file is " + std::to_string(needed) + " bytes, " +
            std::to_string(space.available) + " available)";
    }
    throw StoreError("cannot copy " + source.string() + " to " + target.parent_path().string() + ": " + why);
  }
  fs::permissions(temp, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                            fs::perms::others_exec);
  fsync_path(temp, false);
  std::string copied = sha256_file(temp);
  if (copied != source_sha256) {
    fs::remove(temp, ec);
    throw StoreError(source.string() + " changed while it was copied (hash " + copied + ", expected " + source_sha256 +
                     ")");
  }
  fs::rename(temp, target);
  fsync_path(target.parent_path(), true);
  return copied;
}

// {name: sha256} of the non-system libraries this process loaded, as recorded in attempt manifests.
nlohmann::json loaded_libraries_json() {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& library : non_system_libraries()) {
    out[library.name] = library.sha256;
  }
  return out;
}

// Whether a directory holds nothing but the sweep lock (taken before the sweep is created in it).
bool empty_but_lock(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename() != ".lock") {
      return false;
    }
  }
  return !ec;
}

bool is_hex_digest(const std::string& s) {
  return s.size() == 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

bool process_gone(const nlohmann::json& manifest) {
  if (!manifest.contains("host") || !manifest.contains("pid")) {
    return false;
  }
  if (!manifest["host"].is_string() || manifest["host"].get<std::string>() != host_name()) {
    return false;
  }
  if (!manifest["pid"].is_number_integer()) {
    return false;
  }
  const auto pid = manifest["pid"].get<long long>();
  if (pid <= 0) {
    return false;
  }
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
    return true;
  }
  // A zombie has exited and only waits to be reaped: a worker killed with its parent is reparented to PID 1, which in
  // a container may reap it late or never. /proc/PID/stat: "pid (comm) S ...", the state after the last ')'.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const std::size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && (text[close + 2] == 'Z' || text[close + 2] == 'X');
}

}  // namespace

std::string to_string(AttemptStatus status) {
  switch (status) {
    case AttemptStatus::running:
      return "running";
    case AttemptStatus::complete:
      return "complete";
    case AttemptStatus::failed:
      return "failed";
  }
  return "?";
}

std::string to_string(CellState state) {
  switch (state) {
    case CellState::pending:
      return "pending";
    case CellState::running:
      return "running";
    case CellState::failed:
      return "failed";
    case CellState::noncanonical:
      return "noncanonical";
    case CellState::done:
      return "done";
  }
  return "?";
}

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buffer[64];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[80];
  std::snprintf(out, sizeof out, "%s.%03dZ", buffer, static_cast<int>(millis));
  return out;
}

std::string read_regular_file(const fs::path& path) {
  try {
    return util::read_text(path);
  } catch (const util::FileError& e) {
    throw StoreError(e.what());
  }
}

void write_file_atomic(const fs::path& path, const std::string& bytes, bool durable) {
  try {
    util::write_atomic(path, bytes, durable);
  } catch (const util::FileError& e) {
    throw StoreError(e.what());
  }
}

namespace {

// Removes a new sweep's key again when the creation fails (the sweep it belongs to never existed).
struct KeyGuard {
  const fs::path& path;
  bool keep = false;
  ~KeyGuard() {
    if (!keep) {
      std::error_code ignored;
      fs::remove(path, ignored);
    }
  }
};

}  // namespace

void SweepStore::check_resumable(const std::string& spec_sha256) const {
  if (m_spec_sha256 != spec_sha256) {
    throw StoreError("the spec changed since the sweep " + m_dir.string() + " was created (frozen spec.toml has hash " +
                     m_spec_sha256 + ", this spec " + spec_sha256 +
                     "); start a new sweep directory for a changed spec, or, when it only adds cells (more seeds, "
                     "grid values or formats), extend this one with --extend");
  }
  require_key("resume");
  require_no_links("resume");
  if (const auto problems = check_record(); !problems.empty()) {
    std::string list;
    for (const auto& p : problems) {
      list += "\n  " + p;
    }
    throw StoreError("cannot resume " + m_dir.string() + ": its signed record was edited, so its attempts cannot be " +
                     "trusted; start a new sweep directory (or restore journal.jsonl and sweep.json):" + list);
  }
}

// Repair the frozen inputs from copies whose hashes are the registered (signed) ones, or refuse.
void SweepStore::repair_frozen_inputs(const std::string& spec_text, const fs::path& executable,
                                      const std::string& executable_sha256) {
  const fs::path frozen = executable_path();
  const bool exe_missing = !fs::exists(frozen);
  if (exe_missing || sha256_file(frozen) != m_binary_sha256) {
    const std::string what = exe_missing ? "is missing" : "was modified (hash differs from sweep.json)";
    if (executable_sha256 != m_binary_sha256) {
      throw StoreError("the executable copy " + frozen.string() + " " + what + " and this executable (" +
                       executable.string() + ", hash " + executable_sha256 + ") is not the registered one (hash " +
                       m_binary_sha256 + "); resume with the registered binary to restore it");
    }
    freeze_executable(executable, executable_sha256, frozen);
    m_repairs.push_back("the executable copy " + frozen.string() + " " + what + ": restored from " +
                        executable.string() + " (the registered binary)");
  }
  repair_frozen_libraries();
  const bool spec_missing = !fs::exists(spec_path());
  if (spec_missing || sha256_file(spec_path()) != m_spec_sha256) {
    write_file_atomic(spec_path(), spec_text);
    m_repairs.push_back("the frozen spec " + spec_path().string() + " " +
                        (spec_missing ? "is missing" : "was modified") +
                        ": restored from the given spec (its hash is the registered one)");
  }
}

// The frozen shared libraries (bin/lib/): restored from this process' own, when their hashes are the registered ones.
void SweepStore::repair_frozen_libraries() {
  for (const auto& entry : m_libraries) {
    const std::string& name = entry.first;  // not a structured binding: the lambda below captures it (clang < 16)
    const std::string& sha = entry.second;
    const fs::path frozen_lib = library_dir() / name;
    const bool missing = !fs::exists(frozen_lib);
    if (!missing && sha256_file(frozen_lib) == sha) {
      continue;
    }
    const std::string what = missing ? "is missing" : "was modified (hash differs from sweep.json)";
    const auto& loaded = non_system_libraries();
    const auto it = std::find_if(loaded.begin(), loaded.end(),
                                 [&](const LoadedLibrary& l) { return l.name == name && l.sha256 == sha; });
    if (it == loaded.end()) {
      throw StoreError("the frozen library " + frozen_lib.string() + " " + what +
                       " and this executable did not load the registered one (hash " + sha +
                       "); resume with the registered binary and its libraries to restore it");
    }
    freeze_executable(it->path, sha, frozen_lib);
    m_repairs.push_back("the frozen library " + frozen_lib.string() + " " + what + ": restored from " +
                        it->path.string() + " (the registered library)");
  }
}

// Gives each cell its id and takes them, refusing duplicate names or configurations, unknown roles and references to
// cells that do not exist.
void SweepStore::set_new_cells(std::vector<StoredCell> cells) {
  std::set<std::string> names;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    auto& cell = cells[i];
    cell.id = cell_id(cell.config);
    if (!names.insert(cell.name).second) {
      throw StoreError("duplicate cell name \"" + cell.name + "\"");
    }
    if (auto [it, fresh] = m_index.emplace(cell.id, i); !fresh) {
      throw StoreError("cells \"" + cells[it->second].name + "\" and \"" + cell.name +
                       "\" have the same configuration (cell id " + cell.id + ")");
    }
    if (cell.role != "reference" && cell.role != "target") {
      throw StoreError("cell \"" + cell.name + "\": role must be reference or target, not \"" + cell.role + "\"");
    }
  }
  for (const auto& cell : cells) {
    if (!cell.reference.empty() && !names.count(cell.reference)) {
      throw StoreError("cell \"" + cell.name + "\" names the reference \"" + cell.reference +
                       "\", which is not a cell");
    }
  }
  m_cells = std::move(cells);
  for (std::size_t i = 0; i < m_cells.size(); ++i) {
    m_by_name.emplace(m_cells[i].name, i);
  }
}

// Copies the executable to bin/wbaudit and, with_libraries, its shared libraries from outside the system directories
// beside it (bin/lib/, found through the executable's $ORIGIN/lib RUNPATH): a compute node without the build host's
// home directory runs the copy. Known only for this process' own executable. Returns sweep.json's "libraries".
nlohmann::json SweepStore::freeze_binary(const fs::path& executable, const std::string& executable_sha256,
                                         bool with_libraries) {
  m_binary_sha256 = freeze_executable(executable, executable_sha256, executable_path());
  nlohmann::json libraries = nlohmann::json::array();
  if (with_libraries) {
    for (const auto& library : non_system_libraries()) {
      m_libraries[library.name] = freeze_executable(library.path, library.sha256, library_dir() / library.name);
      libraries.push_back({{"name", library.name}, {"sha256", library.sha256}});
    }
    m_has_libraries = true;
  }
  return libraries;
}

// The text of sweep.json for a new sweep.
std::string SweepStore::sweep_record_text(const nlohmann::json& libraries) const {
  nlohmann::json cells_json = nlohmann::json::array();
  for (const auto& cell : m_cells) {
    cells_json.push_back({{"id", cell.id},
                          {"name", cell.name},
                          {"role", cell.role},
                          {"reference", cell.reference},
                          {"config", cell.config}});
  }
  nlohmann::json sweep = {{"schema", kSweepSchema},
                          {"sweep_uuid", m_sweep_uuid},
                          {"created", m_created},
                          {"spec_sha256", m_spec_sha256},
                          {"binary_sha256", m_binary_sha256},
                          {"build", build_identity()},
                          {"numeric", sim::numeric_identity().to_json()},
                          {"cells", cells_json}};
  if (m_has_libraries) {
    sweep["libraries"] = libraries;
  }
  return sweep.dump(1) + "\n";
}

SweepStore SweepStore::create(const fs::path& dir, const std::string& spec_text, std::vector<StoredCell> cells,
                              const CreateOptions& options) {
  const std::string spec_sha256 = sha256_hex(spec_text);
  const fs::path executable = options.executable.empty() ? self_executable() : options.executable;
  const std::string executable_sha256 =
      options.executable.empty() ? self_executable_sha256() : sha256_file(options.executable);

  if (fs::exists(dir / "sweep.json")) {
    if (!options.resume) {
      throw StoreError("sweep directory " + dir.string() + " already exists; use --resume to continue it");
    }
    SweepStore store = open(dir);
    store.check_resumable(spec_sha256);
    store.repair_frozen_inputs(spec_text, executable, executable_sha256);
    return store;
  }
  if (fs::exists(dir) && !options.resume && !empty_but_lock(dir)) {
    throw StoreError("sweep directory " + dir.string() + " already exists; use --resume to continue it");
  }

  SweepStore store;
  store.m_dir = dir;
  store.m_spec_sha256 = spec_sha256;
  store.m_created = utc_now();
  store.m_sweep_uuid = random_uuid();
  store.set_new_cells(std::move(cells));
  // The key first: a key location that cannot be written (or a WBAUDIT_KEY_FILE of another sweep) is refused before
  // anything is written into DIR.
  const SweepKey key = create_sweep_key(store.m_sweep_uuid);
  KeyGuard key_guard{key.path};

  std::error_code ec;
  fs::create_directories(dir / "cells", ec);
  if (ec) {
    throw StoreError("cannot create " + (dir / "cells").string() + ": " + ec.message());
  }
  write_file_atomic(store.spec_path(), spec_text);
  const nlohmann::json libraries = store.freeze_binary(executable, executable_sha256, options.executable.empty());
  // The journal starts with the signed hash of sweep.json; sweep.json is written last: its presence marks a
  // completely created sweep directory.
  const std::string sweep_text = store.sweep_record_text(libraries);
  const std::string genesis = journal_genesis_line(key, sha256_hex(sweep_text));
  write_file_atomic(store.journal_path(), genesis);
  write_journal_head(key, dir, JournalHead{1, sha256_hex(genesis.substr(0, genesis.size() - 1))});
  write_file_atomic(dir / "sweep.json", sweep_text);
  key_guard.keep = true;
  return open(dir);
}

namespace {

// Renames cells of a sweep record (and the references of targets that name them).
void rename_cells(nlohmann::json& sweep, const std::vector<std::pair<std::string, std::string>>& renamed) {
  std::map<std::string, std::string> by_old_name;
  for (auto& cell : sweep["cells"]) {
    for (const auto& [id, name] : renamed) {
      if (cell["id"] == id) {
        by_old_name[cell["name"].get<std::string>()] = name;
        cell["name"] = name;
      }
    }
  }
  for (auto& cell : sweep["cells"]) {
    if (const auto it = by_old_name.find(cell["reference"].get<std::string>()); it != by_old_name.end()) {
      cell["reference"] = it->second;
    }
  }
}

}  // namespace

void SweepStore::extend(const std::string& spec_text, const std::vector<StoredCell>& added,
                        const std::vector<std::pair<std::string, std::string>>& renamed) const {
  require_key("extend");
  require_no_links("extend");
  auto refuse = [this](const std::string& why, const std::vector<std::string>& problems) {
    throw StoreError("cannot extend " + m_dir.string() + ": " + why + ":\n  " + [&problems] {
      std::string list;
      for (const auto& p : problems) {
        list += (list.empty() ? "" : "\n  ") + p;
      }
      return list;
    }());
  };
  if (const auto problems = check_record(); !problems.empty()) {
    refuse("its signed record was edited, so its attempts cannot be trusted", problems);
  }
  if (const auto problems = check_frozen_inputs(); !problems.empty()) {
    refuse("its frozen inputs changed (resume it with the spec that made it, which repairs them, then extend)",
           problems);
  }
  if (!renamed.empty() && (fs::exists(m_dir / "registry") || fs::exists(m_dir / "deviations.jsonl"))) {
    throw StoreError("cannot extend " + m_dir.string() + ": the new spec renames its existing cells (" +
                     cell(renamed[0].first).name + " would be " + renamed[0].second +
                     ", e.g. a seed moved into [grid]), and its registered analyses or deviations name cells by "
                     "their names; keep the existing cells' names in the new spec");
  }
  const std::string spec_sha256 = sha256_hex(spec_text);
  std::error_code ec;
  fs::create_directories(m_dir / "specs", ec);
  if (ec) {
    throw StoreError("cannot create " + (m_dir / "specs").string() + ": " + ec.message());
  }
  write_file_atomic(m_dir / "specs" / (m_spec_sha256 + ".toml"), read_regular_file(spec_path()));
  nlohmann::json sweep = nlohmann::json::parse(read_regular_file(m_dir / "sweep.json"));
  rename_cells(sweep, renamed);
  nlohmann::json ids = nlohmann::json::array();
  for (const auto& cell : added) {
    sweep["cells"].push_back({{"id", cell.id},
                              {"name", cell.name},
                              {"role", cell.role},
                              {"reference", cell.reference},
                              {"config", cell.config}});
    ids.push_back(cell.id);
  }
  nlohmann::json extension = {
      {"time", utc_now()}, {"previous_spec_sha256", m_spec_sha256}, {"spec_sha256", spec_sha256}, {"cells_added", ids}};
  if (!sweep.contains("extensions")) {
    sweep["extensions"] = nlohmann::json::array();
  }
  sweep["extensions"].push_back(extension);
  sweep["spec_sha256"] = spec_sha256;
  const std::string text = sweep.dump(1) + "\n";
  extension["event"] = "extend";
  extension["sweep_sha256"] = sha256_hex(text);
  extension.erase("time");
  journal_record(extension);  // signed first: sweep.json is then the record the journal names last
  write_file_atomic(m_dir / "sweep.json", text);
  write_file_atomic(spec_path(), spec_text);
}

SweepStore SweepStore::open(const fs::path& dir) {
  const fs::path file = dir / "sweep.json";
  if (!fs::exists(file)) {
    throw StoreError(dir.string() + " is not a sweep directory (no sweep.json)");
  }
  nlohmann::json sweep;
  try {
    sweep = nlohmann::json::parse(read_text(file));
  } catch (const nlohmann::json::exception& e) {
    throw StoreError(file.string() + ": corrupt sweep record: " + e.what());
  }
  SweepStore store;
  store.m_dir = dir;
  store.m_sweep_json_sha256 = sha256_file(file);
  try {
    if (sweep.at("schema").get<std::string>() != kSweepSchema) {
      throw StoreError(file.string() + ": unknown schema \"" + sweep["schema"].get<std::string>() + "\"");
    }
    store.m_spec_sha256 = sweep.at("spec_sha256").get<std::string>();
    store.m_binary_sha256 = sweep.at("binary_sha256").get<std::string>();
    store.m_created = sweep.at("created").get<std::string>();
    store.m_sweep_uuid = sweep.value("sweep_uuid", std::string());
    if (sweep.contains("numeric")) {
      store.m_numeric = sweep["numeric"];
    }
    for (const auto& extension : sweep.value("extensions", nlohmann::json::array())) {
      store.m_previous_specs.push_back(extension.at("previous_spec_sha256").get<std::string>());
    }
    if (sweep.contains("libraries")) {
      store.m_has_libraries = true;
      for (const auto& library : sweep.at("libraries")) {
        const std::string name = library.at("name").get<std::string>();
        if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
          throw StoreError(file.string() + ": library name \"" + name + "\" is not a file name");
        }
        store.m_libraries[name] = library.at("sha256").get<std::string>();
      }
    }
    for (const auto& c : sweep.at("cells")) {
      StoredCell cell{c.at("id").get<std::string>(), c.at("name").get<std::string>(), c.at("role").get<std::string>(),
                      c.at("reference").get<std::string>(), c.at("config")};
      if (cell_id(cell.config) != cell.id) {
        throw StoreError(file.string() + ": cell \"" + cell.name + "\": id " + cell.id +
                         " does not match its configuration (edited sweep.json)");
      }
      store.m_index.emplace(cell.id, store.m_cells.size());
      store.m_by_name.emplace(cell.name, store.m_cells.size());
      store.m_cells.push_back(std::move(cell));
    }
  } catch (const nlohmann::json::exception& e) {
    throw StoreError(file.string() + ": corrupt sweep record: " + e.what());
  }
  store.load_key();
  return store;
}

void SweepStore::load_key() {
  m_signing = std::make_shared<SigningState>();
  if (m_sweep_uuid.empty()) {
    m_signing->key_problem = "the sweep " + m_dir.string() +
                             " was created before signed provenance (no sweep_uuid in sweep.json), so it has no key";
    return;
  }
  std::string why;
  m_signing->key = load_sweep_key(m_sweep_uuid, why);
  m_signing->key_problem = why;
}

fs::path SweepStore::key_path() const {
  if (can_verify()) {
    return m_signing->key->path;
  }
  return is_uuid(m_sweep_uuid) ? sweep_key_path(m_sweep_uuid) : fs::path();
}

bool SweepStore::can_verify() const {
  return m_signing && m_signing->key.has_value();
}

const std::string& SweepStore::key_problem() const {
  return m_signing->key_problem;
}

std::string SweepStore::sign(const std::string& context, const nlohmann::json& value) const {
  require_key("sign a record of");
  return sign_json(*m_signing->key, context, value);
}

std::string SweepStore::signature_problem(const std::string& context, const nlohmann::json& value) const {
  if (!can_verify()) {
    return "cannot be verified: " + key_problem();
  }
  if (!value.is_object() || !value.contains("hmac")) {
    return "not signed (written by hand, or before records were signed)";
  }
  if (!signature_valid(*m_signing->key, context, value)) {
    return "not signed by this sweep's key (edited, or made "
           "with another sweep's key)";
  }
  return {};
}

void SweepStore::require_key(const std::string& what) const {
  if (!can_verify()) {
    throw StoreError("cannot " + what + " the sweep " + m_dir.string() + " without its signing key: " + key_problem());
  }
}

SweepStore::JournalView SweepStore::journal_view(const std::string& cell_id, const std::string& uuid) const {
  JournalView view;
  if (!can_verify()) {
    return view;
  }
  std::lock_guard<std::mutex> guard(m_signing->mutex);
  JournalIndex& index = m_signing->index;
  std::error_code ec;
  const auto size = fs::file_size(journal_path(), ec);
  if (ec || size < index.offset) {
    index = JournalIndex{};  // missing, or shorter than what was read: read afresh
  }
  if (ec || size != index.offset || index.entries == 0) {
    journal_read_more(journal_path(), *m_signing->key, index);
  }
  const auto id = std::make_pair(cell_id, uuid);
  view.begun = index.begun.count(id) > 0;
  view.entries = index.entries;
  if (auto it = index.finished.find(id); it != index.finished.end()) {
    view.finished = it->second;
  }
  return view;
}

std::vector<std::string> SweepStore::check_record() const {
  if (!m_sweep_uuid.empty() && !is_uuid(m_sweep_uuid)) {
    return {key_problem()};
  }
  if (!can_verify()) {
    return {};
  }
  (void)journal_view("", "");  // brings the index up to date
  std::lock_guard<std::mutex> guard(m_signing->mutex);
  const JournalIndex& index = m_signing->index;
  std::vector<std::string> problems = index.problems;
  if (index.entries == 0 && problems.empty()) {
    problems.push_back(journal_path().string() +
                       " is empty: the sweep's record was removed (start a new sweep "
                       "directory, or restore the journal)");
  }
  const auto& signed_sweep = index.sweep_json;
  if (signed_sweep && *signed_sweep != m_sweep_json_sha256) {
    problems.push_back((m_dir / "sweep.json").string() +
                       " differs from the record signed when the sweep was created (edited)");
  }
  std::string head_problem;
  const auto head = read_journal_head(*m_signing->key, m_dir, head_problem);
  if (!head_problem.empty()) {
    problems.push_back(head_problem);
  }
  if (head && head->entries > index.entries) {
    problems.push_back(journal_path().string() + " has " + std::to_string(index.entries) + " entries, but its signed " +
                       "head (" + journal_head_path(*m_signing->key, m_dir).string() + ") records " +
                       std::to_string(head->entries) + ": entries were removed from its end");
  } else if (head && head->entries > 0 && index.line_hashes[head->entries - 1] != head->last_sha256) {
    problems.push_back("journal entry #" + std::to_string(head->entries - 1) +
                       " is not the one its signed head records (the journal was replaced)");
  }
  return problems;
}

std::optional<SweepStore::JournaledRecords> SweepStore::journaled_records() const {
  if (!can_verify()) {
    return std::nullopt;
  }
  (void)journal_view("", "");
  std::lock_guard<std::mutex> guard(m_signing->mutex);
  const JournalIndex& index = m_signing->index;
  return JournaledRecords{index.registrations, index.deviations, index.outputs};
}

void SweepStore::journal_record(nlohmann::json entry) const {
  require_key("record in the journal of");
  journal_append(journal_path(), *m_signing->key, std::move(entry));
}

std::vector<std::string> SweepStore::link_problems() const {
  std::vector<std::string> problems;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(m_dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_symlink(ec)) {
      continue;
    }
    std::error_code ignored;
    const fs::path target = fs::read_symlink(it->path(), ignored);
    problems.push_back(it->path().string() + " is a symbolic link (to " + target.string() +
                       "): wbaudit never writes through links; remove it (a sweep holds none)");
    if (problems.size() >= 20) {
      break;
    }
  }
  if (ec) {
    problems.push_back("cannot list " + m_dir.string() + ": " + ec.message());
  }
  return problems;
}

void SweepStore::require_no_links(const std::string& what) const {
  const auto problems = link_problems();
  if (problems.empty()) {
    return;
  }
  std::string list;
  for (const auto& p : problems) {
    list += "\n  " + p;
  }
  throw StoreError("cannot " + what + " " + m_dir.string() + ":" + list);
}

std::vector<std::string> SweepStore::numeric_problems(const std::vector<CellStatus>& statuses) const {
  std::vector<std::string> problems;
  if (m_numeric.is_null()) {  // a sweep made before numeric identities were recorded
    return problems;
  }
  const sim::NumericIdentity sweep = sim::NumericIdentity::from_json(m_numeric);
  for (const auto& status : statuses) {
    if (!status.canonical_attempt) {
      continue;
    }
    const auto& manifest = status.attempts[*status.canonical_attempt].manifest;
    if (!manifest.contains("numeric")) {
      continue;
    }
    const sim::NumericIdentity cell = sim::NumericIdentity::from_json(manifest["numeric"]);
    if (cell.contract() != sweep.contract()) {
      problems.push_back("cell " + status.cell->name + " ran under another numeric contract (" + cell.contract() +
                         ") than the sweep's (" + sweep.contract() +
                         "): its trace may differ in the last bits from the sweep's other cells");
    }
  }
  return problems;
}

std::vector<std::string> SweepStore::unknown_cell_directories() const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(m_dir / "cells", ec)) {
    const std::string name = entry.path().filename().string();
    if (!m_index.count(name)) {
      out.push_back("cells/" + name);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool SweepStore::journal_torn_tail() const {
  if (!can_verify()) {
    return false;
  }
  (void)journal_view("", "");
  std::lock_guard<std::mutex> guard(m_signing->mutex);
  return m_signing->index.torn_tail;
}

namespace {

// The derived outputs of a sweep, relative to it: summary.csv, trajectories.csv, report/**.
std::map<std::string, fs::path> derived_outputs(const fs::path& dir) {
  std::map<std::string, fs::path> out;
  for (const char* name : {"summary.csv", "trajectories.csv"}) {
    if (fs::is_regular_file(dir / name)) {
      out[name] = dir / name;
    }
  }
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir / "report", ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file() && !it->is_symlink()) {
      out[fs::relative(it->path(), dir).generic_string()] = it->path();
    }
  }
  return out;
}

// The pid in a temporary's name ".<name>.tmp.<pid>" / "<name>.tmp.<pid>", or 0.
long temporary_pid(const std::string& name) {
  const auto at = name.rfind(".tmp.");
  if (at == std::string::npos || at + 5 >= name.size()) {
    return 0;
  }
  const std::string digits = name.substr(at + 5);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 10) {
    return 0;
  }
  return std::stol(digits);
}

bool pid_alive(long pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH);
}

}  // namespace

void SweepStore::record_outputs() const {
  if (!can_verify()) {
    return;
  }
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, path] : derived_outputs(m_dir)) {
    files[name] = sha256_file(path);
  }
  journal_record({{"event", "outputs"}, {"files", files}});
}

std::vector<std::string> SweepStore::output_problems() const {
  std::vector<std::string> problems;
  const auto records = journaled_records();
  if (!records || records->outputs.empty()) {
    return problems;
  }
  const auto present = derived_outputs(m_dir);
  const std::string fix = " (`wbaudit report " + m_dir.string() + "` writes them again from the canonical traces)";
  for (const auto& [name, sha] : records->outputs) {
    const auto it = present.find(name);
    if (it == present.end()) {
      problems.push_back(name + " is missing" + fix);
    } else if (sha256_file(it->second) != sha) {
      problems.push_back(name + " differs from the one wbaudit wrote (edited)" + fix);
    }
  }
  for (const auto& [name, path] : present) {
    if (!records->outputs.count(name)) {
      problems.push_back(name + " was not written by wbaudit" + fix);
    }
  }
  return problems;
}

std::vector<std::string> SweepStore::remove_leftover_temporaries() const {
  std::vector<std::string> removed;
  std::vector<fs::path> doomed;
  std::error_code ec;
  auto consider = [&](const fs::path& path, bool attempt_done) {
    const std::string name = path.filename().string();
    const long pid = temporary_pid(name);
    const bool temporary = pid > 0 || (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0);
    if (!temporary) {
      return;
    }
    if (attempt_done || (pid > 0 ? !pid_alive(pid) : path.parent_path().filename() == "report")) {
      doomed.push_back(path);
    }
  };
  for (const auto& entry : fs::directory_iterator(m_dir, ec)) {
    consider(entry.path(), false);
  }
  for (const auto& entry : fs::directory_iterator(m_dir / "report", ec)) {
    consider(entry.path(), false);
  }
  for (const auto& cell : m_cells) {
    for (const auto& attempt : fs::directory_iterator(m_dir / "cells" / cell.id / "attempts", ec)) {
      std::vector<fs::path> temporaries;
      std::error_code inner;
      for (const auto& entry : fs::directory_iterator(attempt.path(), inner)) {
        if (entry.path().filename().string().find(".tmp") != std::string::npos) {
          temporaries.push_back(entry.path());
        }
      }
      if (temporaries.empty()) {
        continue;
      }
      // Only the manifest is read (not the trace hashes): an attempt that ended, or whose process is gone, is done
      // writing.
      nlohmann::json manifest;
      try {
        manifest = nlohmann::json::parse(read_text(attempt.path() / "manifest.json"));
      } catch (const std::exception&) {
        continue;
      }
      const std::string status = manifest.is_object() ? manifest.value("status", std::string()) : std::string();
      const bool done = status == "complete" || status == "failed" || (status == "running" && process_gone(manifest));
      for (const auto& path : temporaries) {
        consider(path, done);
      }
    }
  }
  for (const auto& path : doomed) {
    std::error_code rm;
    if (fs::is_symlink(path, rm) || !fs::is_directory(path, rm)) {
      fs::remove(path, rm);
    } else {
      fs::remove_all(path, rm);
    }
    if (!rm) {
      removed.push_back("removed " + path.string() + ", a temporary left by a killed process");
    }
  }
  return removed;
}

std::vector<std::string> SweepStore::set_aside_foreign() const {
  std::vector<std::string> moved;
  for (const auto& stored : m_cells) {
    const CellStatus status = cell_status(stored.id);
    for (const auto& name : status.foreign) {
      const fs::path from = m_dir / "cells" / stored.id / "attempts" / name;
      fs::path to = m_dir / "foreign" / stored.id / name;
      std::error_code ec;
      fs::create_directories(to.parent_path(), ec);
      for (int n = 1; fs::exists(to); ++n) {
        to = m_dir / "foreign" / stored.id / (name + "." + std::to_string(n));
      }
      fs::rename(from, to, ec);
      if (ec) {
        throw StoreError("cannot move " + from.string() + " to " + to.string() + ": " + ec.message());
      }
      moved.push_back("cell " + stored.name + ": moved the foreign attempt directory " + name + " (not made by this " +
                      "sweep's runner) to " + to.string());
    }
  }
  return moved;
}

void SweepStore::sign_and_write_manifest(const fs::path& dir, nlohmann::json& manifest, bool journal_finish) const {
  const SweepKey& key = *m_signing->key;
  manifest.erase("hmac");
  manifest["hmac"] = sign_json(key, kManifestSchema, manifest);
  write_file_atomic(dir / "manifest.json", manifest.dump(1) + "\n", /*durable=*/false);
  if (journal_finish) {
    journal_append(journal_path(), key,
                   {{"event", "finish"},
                    {"cell", manifest["cell_id"]},
                    {"attempt", manifest["uuid"]},
                    {"status", manifest["status"]},
                    {"manifest_sha256", sha256_hex(canonical_json(manifest))}});
  }
}

const StoredCell& SweepStore::cell(const std::string& id) const {
  auto it = m_index.find(id);
  if (it == m_index.end()) {
    throw StoreError("no cell with id " + id + " in the sweep " + m_dir.string());
  }
  return m_cells[it->second];
}

const StoredCell* SweepStore::find_by_name(const std::string& name) const {
  const auto it = m_by_name.find(name);  // an index: lookups by name were linear, evaluate quadratic in cells
  return it == m_by_name.end() ? nullptr : &m_cells[it->second];
}

std::vector<std::string> SweepStore::check_frozen_inputs() const {
  std::vector<std::string> problems;
  if (!fs::exists(spec_path())) {
    problems.push_back("frozen spec " + spec_path().string() + " is missing");
  } else if (sha256_file(spec_path()) != m_spec_sha256) {
    problems.push_back("frozen spec " + spec_path().string() + " was modified (hash differs from sweep.json)");
  }
  if (!fs::exists(executable_path())) {
    problems.push_back("executable copy " + executable_path().string() +
                       " is missing (resume with the registered binary restores it)");
  } else if (sha256_file(executable_path()) != m_binary_sha256) {
    problems.push_back("executable copy " + executable_path().string() +
                       " was modified (hash differs from sweep.json)");
  }
  // Nothing else may sit in bin/ or bin/lib/: the executable's RUNPATH looks in bin/lib/ first, so a file there under
  // a system library's name would be loaded by the frozen binary (and see the key).
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(m_dir / "bin", ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const fs::path rel = fs::relative(it->path(), m_dir);
    const std::string name = it->path().filename().string();
    const bool expected = rel == fs::path("bin/wbaudit") || rel == fs::path("bin/lib") ||
                          (rel.parent_path() == fs::path("bin/lib") && m_libraries.count(name));
    if (it->is_symlink(ec)) {
      problems.push_back(it->path().string() + " is a symbolic link (the frozen binary and its libraries are copies)");
    } else if (!expected) {
      problems.push_back(it->path().string() + " is not part of the frozen binary (bin/ holds only bin/wbaudit and " +
                         "the registered libraries in bin/lib/; a library there would be loaded by the frozen binary)");
    }
  }
  for (const auto& [name, sha] : m_libraries) {
    const fs::path file = library_dir() / name;
    if (!fs::exists(file)) {
      problems.push_back("frozen library " + file.string() +
                         " is missing (resume with the registered binary restores it)");
    } else if (sha256_file(file) != sha) {
      problems.push_back("frozen library " + file.string() + " was modified (hash differs from sweep.json)");
    }
  }
  return problems;
}

Attempt SweepStore::begin_attempt(const std::string& id) const {
  const StoredCell& stored = cell(id);
  Attempt attempt;
  attempt.m_cell_id = id;
  attempt.m_uuid = random_uuid();
  attempt.m_dir = m_dir / "cells" / id / "attempts" / attempt.m_uuid;
  require_key("run cells of");
  for (const fs::path& part : {m_dir / "cells", m_dir / "cells" / id, m_dir / "cells" / id / "attempts"}) {
    std::error_code ec;
    if (fs::is_symlink(part, ec)) {
      throw StoreError("cannot run cell " + stored.name + ": " + part.string() +
                       " is a symbolic link; wbaudit never writes through links (remove it)");
    }
  }
  // The journal hears of the attempt before its directory exists, so no directory the runner made is ever foreign.
  const std::size_t seq =
      journal_append(journal_path(), *m_signing->key, {{"event", "begin"}, {"cell", id}, {"attempt", attempt.m_uuid}});
  std::error_code ec;
  fs::create_directories(attempt.m_dir, ec);
  if (ec) {
    throw StoreError("cannot create the attempt directory " + attempt.m_dir.string() + ": " + ec.message());
  }
  attempt.m_manifest = {{"schema", kManifestSchema},
                        {"uuid", attempt.m_uuid},
                        {"cell_id", id},
                        {"cell_name", stored.name},
                        {"spec_sha256", m_spec_sha256},
                        {"host", host_name()},
                        {"pid", static_cast<long long>(::getpid())},
                        {"start", utc_now()},
                        {"end", nullptr},
                        {"status", "running"},
                        {"exit_reason", ""},
                        {"slurm", slurm_identity()},
                        {"build", build_identity()},
                        {"executable_sha256", self_executable_sha256()},
                        {"libraries", loaded_libraries_json()},
                        {"files", nlohmann::json::object()},
                        {"sweep_uuid", m_sweep_uuid},
                        {"journal_seq", seq},
                        {"numeric", sim::numeric_identity().to_json()}};
  sign_and_write_manifest(attempt.m_dir, attempt.m_manifest, /*journal_finish=*/false);
  return attempt;
}

AttemptRecord SweepStore::finish_attempt(Attempt& attempt, AttemptStatus status, const std::string& exit_reason,
                                         const std::vector<std::string>& files) const {
  if (status == AttemptStatus::running) {
    throw StoreError("finish_attempt: status must be complete or failed");
  }
  nlohmann::json hashes = nlohmann::json::object();
  std::string reason = exit_reason;
  for (const auto& name : files) {
    const fs::path relative(name);
    if (relative.is_absolute() || relative.empty() || *relative.begin() == ".." || name == "manifest.json") {
      status = AttemptStatus::failed;
      reason += (reason.empty() ? "" : "; ") + std::string("invalid output path \"") + name + "\"";
      continue;
    }
    const fs::path full = attempt.m_dir / relative;
    if (!fs::is_regular_file(full)) {
      status = AttemptStatus::failed;
      reason += (reason.empty() ? "" : "; ") + std::string("output file \"") + name + "\" was not written";
      continue;
    }
    hashes[name] = sha256_file(full);
  }
  if (status == AttemptStatus::failed) {
    // A failed attempt is never resumed (a rerun is a new attempt): its streamed partial trace only takes space,
    // which a run that failed on a full disk needs back.
    const fs::path partial = sim::partial_trace_path(attempt.m_dir / "trace.h5");
    std::error_code ec;
    if (fs::is_regular_file(fs::symlink_status(partial, ec)) && fs::remove(partial, ec)) {
      reason += (reason.empty() ? "" : "; ") + std::string("its partial trace was removed to free the space");
    }
  }
  attempt.m_manifest["files"] = hashes;
  attempt.m_manifest["status"] = to_string(status);
  attempt.m_manifest["exit_reason"] = reason;
  attempt.m_manifest["end"] = utc_now();
  sign_and_write_manifest(attempt.m_dir, attempt.m_manifest, /*journal_finish=*/true);
  return read_attempt(attempt.m_dir, attempt.m_cell_id);
}

AttemptRecord SweepStore::fail_abandoned_attempt(const std::string& id, const std::string& uuid,
                                                 const std::string& reason) const {
  (void)cell(id);  // throws for a cell that is not in the sweep
  // The uuid comes from another process; it must name a directory inside this cell's attempts, nothing else.
  if (uuid.empty() || uuid.size() > 64 || !std::all_of(uuid.begin(), uuid.end(), [](char c) {
        return std::isxdigit(static_cast<unsigned char>(c)) || c == '-';
      })) {
    throw StoreError("fail_abandoned_attempt: \"" + uuid + "\" is not an attempt uuid");
  }
  const fs::path dir = m_dir / "cells" / id / "attempts" / uuid;
  const fs::path file = dir / "manifest.json";
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_text(file));
  } catch (const nlohmann::json::exception& e) {
    throw StoreError(file.string() + ": corrupt manifest: " + e.what());
  }
  if (manifest.value("status", std::string()) == to_string(AttemptStatus::running)) {
    manifest["status"] = to_string(AttemptStatus::failed);
    manifest["exit_reason"] = reason;
    manifest["end"] = utc_now();
    manifest["files"] = nlohmann::json::object();
    if (can_verify()) {
      sign_and_write_manifest(dir, manifest, /*journal_finish=*/true);
    } else {
      write_file_atomic(file, manifest.dump(1) + "\n", /*durable=*/false);
    }
  }
  return read_attempt(dir, id);
}

namespace {

// Parses manifest.json into the record (status, start, end, exit reason); false, with the reason, when it is corrupt.
bool read_manifest(const fs::path& file, AttemptRecord& record) {
  try {
    record.manifest = nlohmann::json::parse(read_text(file));
    const auto& m = record.manifest;
    if (m.at("schema").get<std::string>() != kManifestSchema) {
      throw StoreError("unknown schema \"" + m["schema"].get<std::string>() + "\"");
    }
    const std::string status = m.at("status").get<std::string>();
    if (status == "running") {
      record.status = AttemptStatus::running;
    } else if (status == "complete") {
      record.status = AttemptStatus::complete;
    } else if (status == "failed") {
      record.status = AttemptStatus::failed;
    } else {
      throw StoreError("unknown status \"" + status + "\"");
    }
    record.start = m.at("start").get<std::string>();
    record.end = m.at("end").is_string() ? m["end"].get<std::string>() : "";
    record.exit_reason = m.at("exit_reason").get<std::string>();
    if (!m.at("files").is_object()) {
      throw StoreError("\"files\" is not an object");
    }
    record.manifest_valid = true;
  } catch (const std::exception& e) {
    record.reasons.push_back("corrupt manifest " + file.string() + ": " + e.what());
    return false;
  }
  return true;
}

// Every file the manifest lists is present with its recorded hash (record.complete), and nothing else is in the
// directory. Returns the listed names.
std::set<std::string> check_listed_files(AttemptRecord& record, bool signed_ok) {
  const auto& m = record.manifest;
  bool hashes_match = true;
  std::set<std::string> listed;
  for (const auto& [name, digest] : m["files"].items()) {
    listed.insert(name);
    const fs::path full = record.dir / name;
    if (!digest.is_string() || !is_hex_digest(digest.get<std::string>())) {
      record.reasons.push_back("manifest entry for " + name + " is not a SHA-256 digest");
      hashes_match = false;
    } else if (!fs::is_regular_file(full)) {
      record.reasons.push_back(name + " is missing");
      hashes_match = false;
    } else if (sha256_file(full) != digest.get<std::string>()) {
      record.reasons.push_back(name + ": SHA-256 differs from the " + (signed_ok ? "signed " : "") +
                               "manifest (edited or corrupt)");
      hashes_match = false;
    }
  }
  if (listed.empty()) {
    record.reasons.push_back("manifest lists no output files");
    hashes_match = false;
  }
  record.complete = hashes_match;
  std::error_code ec;
  for (const auto& entry : fs::recursive_directory_iterator(record.dir, ec)) {
    if (!entry.is_regular_file()) {
      continue;
    }
    const std::string rel = fs::relative(entry.path(), record.dir).generic_string();
    if (rel != "manifest.json" && !listed.count(rel)) {
      record.reasons.push_back("unlisted file " + rel);
    }
  }
  return listed;
}

}  // namespace

// Signed by this sweep's key and recorded in its journal (runners/store/journal.hpp); returns whether the signature
// is valid.
bool SweepStore::check_signed_and_journaled(AttemptRecord& record, const std::string& id) const {
  const auto& m = record.manifest;
  if (!can_verify()) {
    record.reasons.push_back("cannot be verified: " + key_problem());
    return false;
  }
  const bool signed_ok = signature_valid(*m_signing->key, kManifestSchema, m);
  if (!signed_ok) {
    record.reasons.push_back(m.contains("hmac") ? "manifest not signed by this sweep's key (edited, or made with "
                                                  "another sweep's key)"
                                                : "manifest not signed by this sweep's key (it has no signature)");
  }
  const JournalView journal = journal_view(id, record.uuid);
  if (journal.finished.empty()) {
    std::string why = "attempt not in the journal";
    if (m.contains("journal_seq") && m["journal_seq"].is_number_unsigned() &&
        m["journal_seq"].get<std::size_t>() >= journal.entries) {
      why += " (it began as entry #" + std::to_string(m["journal_seq"].get<std::size_t>()) + " but the journal has " +
             std::to_string(journal.entries) + " entries: truncated)";
    } else if (!journal.begun) {
      why += " (made outside this sweep's runner, or copied from another cell or sweep)";
    } else {
      why += " (its runner was killed before recording the finish, or the entry was removed)";
    }
    record.reasons.push_back(why);
  } else if (std::find(journal.finished.begin(), journal.finished.end(), sha256_hex(canonical_json(m))) ==
             journal.finished.end()) {
    record.reasons.push_back("manifest differs from the one the journal recorded for this attempt");
  }
  return signed_ok;
}

// The trace must be this cell's run: its own configuration (written by the engine) must be the cell's, so a trace
// copied from another cell under a rewritten manifest is caught even when every hash matches.
// Cells whose configuration is not a simulator run (none in a real sweep) have nothing to compare against.
void SweepStore::check_trace_is_cells(AttemptRecord& record, const std::string& id) const {
  std::optional<std::string> expected;
  try {
    expected = sim::to_json(sim::run_config_from_json(cell(id).config)).dump();
  } catch (const std::exception&) {
  }
  if (!expected) {
    return;
  }
  try {
    if (sim::read_trace_config_json(record.dir / "trace.h5") != *expected) {
      record.reasons.push_back("trace.h5 is the run of another configuration than cell " + id +
                               " (its config_json differs from the cell's)");
    }
  } catch (const std::exception& e) {
    record.reasons.push_back("trace.h5 cannot be checked against the cell: " + std::string(e.what()));
  }
}

// The manifest names this cell, this directory, the registered spec, binary and libraries.
void SweepStore::check_manifest_identity(AttemptRecord& record, const std::string& id) const {
  const auto& m = record.manifest;
  if (m.value("cell_id", std::string()) != id) {
    record.reasons.push_back("manifest names cell " + m.value("cell_id", std::string("(none)")) +
                             ", not the directory's cell " + id);
  }
  if (m.value("uuid", std::string()) != record.uuid) {
    record.reasons.push_back("manifest uuid " + m.value("uuid", std::string("(none)")) +
                             " does not match its directory " + record.uuid);
  }
  const std::string spec = m.value("spec_sha256", std::string());
  if (spec != m_spec_sha256 &&
      std::find(m_previous_specs.begin(), m_previous_specs.end(), spec) == m_previous_specs.end()) {
    record.reasons.push_back("run under another spec (spec hash " + m.value("spec_sha256", std::string("(none)")) +
                             ", registered " + m_spec_sha256 + ")");
  }
  if (m.value("executable_sha256", std::string()) != m_binary_sha256) {
    record.reasons.push_back("run by another binary (executable hash " +
                             m.value("executable_sha256", std::string("(none)")) + ", registered " + m_binary_sha256 +
                             ")");
  }
  for (const auto& [name, sha] : m_libraries) {
    const auto libraries = m.value("libraries", nlohmann::json::object());
    const std::string used = libraries.is_object() ? libraries.value(name, std::string()) : std::string();
    if (used != sha) {
      record.reasons.push_back(used.empty()
                                   ? "run without the registered library " + name
                                   : "run with another " + name + " (hash " + used + ", registered " + sha + ")");
    }
  }
}

namespace {

// A run that has not finished (running, interrupted or failed) leaves its streamed trace as trace.h5.partial
// (docs/trace-format.md, "Streaming"): say how far it got, never take it for a trace.
void note_partial_trace(AttemptRecord& record, const fs::path& attempt_dir) {
  const fs::path partial = sim::partial_trace_path(attempt_dir / "trace.h5");
  if (!fs::exists(partial)) {
    return;
  }
  try {
    const sim::TraceReader reader(partial, sim::TraceReadOptions{true});
    const auto& steps = reader.header().recorded_steps;
    record.reasons.push_back("incomplete trace " + partial.filename().string() + ": " + std::to_string(steps.size()) +
                             " recorded steps" +
                             (steps.empty() ? std::string() : ", the last at step " + std::to_string(steps.back())) +
                             " of " + std::to_string(reader.header().steps));
  } catch (const std::exception& e) {
    record.reasons.push_back("incomplete trace " + partial.filename().string() + " cannot be read: " + e.what());
  }
}

}  // namespace

AttemptRecord SweepStore::read_attempt(const fs::path& attempt_dir, const std::string& id) const {
  AttemptRecord record;
  record.dir = attempt_dir;
  record.uuid = attempt_dir.filename().string();
  const fs::path file = attempt_dir / "manifest.json";
  if (!fs::exists(file)) {
    record.reasons.push_back("no manifest.json (hand-made directory, or interrupted before its manifest was written)");
    return record;
  }
  if (!read_manifest(file, record)) {
    return record;
  }
  const auto& m = record.manifest;
  // The state's reason comes first (cell_status and run-cells read reasons.front()), then how far a streamed trace
  // got.
  if (record.status == AttemptStatus::running) {
    record.reasons.push_back(process_gone(m) ? "interrupted: process " + std::to_string(m["pid"].get<long long>()) +
                                                   " on " + m["host"].get<std::string>() + " no longer exists"
                                             : "running (or killed on another host) since " + record.start);
    note_partial_trace(record, attempt_dir);
    return record;
  }
  if (record.status == AttemptStatus::failed) {
    record.reasons.push_back("failed: " + record.exit_reason);
    note_partial_trace(record, attempt_dir);
    return record;
  }
  // Complete: signed by this sweep's key and recorded in its journal, every listed file present with its recorded
  // hash, nothing else in the directory, and the trace and the manifest this cell's.
  const bool signed_ok = check_signed_and_journaled(record, id);
  const std::set<std::string> listed = check_listed_files(record, signed_ok);
  if (record.complete && listed.count("trace.h5") && m_index.count(id)) {
    check_trace_is_cells(record, id);
  }
  check_manifest_identity(record, id);
  if (!m_index.count(id)) {
    record.reasons.push_back("cell " + id + " is not part of the sweep");
  }
  record.canonical = record.complete && record.reasons.empty();
  return record;
}

CellStatus SweepStore::cell_status(const std::string& id) const {
  CellStatus status;
  status.cell = &cell(id);
  const fs::path cell_dir = m_dir / "cells" / id;
  std::error_code ec;
  if (fs::exists(cell_dir)) {
    for (const auto& entry : fs::directory_iterator(cell_dir, ec)) {
      if (entry.path().filename() != "attempts") {
        status.reasons.push_back("unexpected entry " + entry.path().filename().string() + " in " + cell_dir.string());
      }
    }
  }
  const fs::path attempts = cell_dir / "attempts";
  if (fs::exists(attempts)) {
    for (const auto& entry : fs::directory_iterator(attempts, ec)) {
      if (!entry.is_directory()) {
        status.reasons.push_back("unexpected file " + entry.path().filename().string() + " in " + attempts.string());
        continue;
      }
      status.attempts.push_back(read_attempt(entry.path(), id));
      const JournalView journal = journal_view(id, status.attempts.back().uuid);
      if (can_verify() && !journal.begun && journal.finished.empty()) {
        status.foreign.push_back(status.attempts.back().uuid);
      }
    }
  }
  std::sort(status.foreign.begin(), status.foreign.end());
  std::sort(status.attempts.begin(), status.attempts.end(), [](const AttemptRecord& a, const AttemptRecord& b) {
    return std::tie(a.start, a.uuid) < std::tie(b.start, b.uuid);
  });
  for (const auto& name : status.foreign) {
    status.reasons.push_back("foreign attempt directory " + name + " (not in the journal: made by hand or copied in)");
  }
  for (std::size_t i = status.attempts.size(); i-- > 0;) {
    if (status.attempts[i].canonical) {
      status.canonical_attempt = i;
      status.state = CellState::done;
      return status;
    }
  }
  if (status.attempts.empty()) {
    status.state = status.reasons.empty() ? CellState::pending : CellState::noncanonical;
    return status;
  }
  // No canonical attempt. Anything that claims completion or that nobody made through the pipeline is
  // non-canonical; otherwise the newest attempt decides between failed and running.
  for (auto it = status.attempts.rbegin(); it != status.attempts.rend(); ++it) {
    if (!it->manifest_valid || it->status == AttemptStatus::complete) {
      status.state = CellState::noncanonical;
      for (const auto& reason : it->reasons) {
        status.reasons.push_back("attempt " + it->uuid + ": " + reason);
      }
      return status;
    }
  }
  const AttemptRecord& newest = status.attempts.back();
  const bool interrupted = !newest.reasons.empty() && newest.reasons.front().rfind("interrupted", 0) == 0;
  status.state = newest.status == AttemptStatus::failed || interrupted ? CellState::failed : CellState::running;
  for (const auto& reason : newest.reasons) {
    status.reasons.push_back("attempt " + newest.uuid + ": " + reason);
  }
  return status;
}

std::vector<CellStatus> SweepStore::status() const {
  std::vector<CellStatus> out;
  out.reserve(m_cells.size());
  for (const auto& cell : m_cells) {
    out.push_back(cell_status(cell.id));
  }
  return out;
}

}  // namespace wbaudit::runners
