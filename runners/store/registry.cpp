#include "runners/store/registry.hpp"

#include <fcntl.h>
#include <fnmatch.h>
#include <pwd.h>
#include <unistd.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "runners/spec/analysis_spec.hpp"
#include "runners/spec/toml_error.hpp"
#include "runners/store/identity.hpp"
#include "runners/store/lock.hpp"
#include "sim/run.hpp"
#include "util/text.hpp"

namespace wbaudit::runners {
namespace fs = std::filesystem;
namespace {

std::string read_text(const fs::path& path) {
  try {
    return read_regular_file(path);
  } catch (const StoreError& e) {
    throw RegistryError(e.what());
  }
}

std::vector<std::string> string_array(const toml::node& node, const std::string& where) {
  const auto* array = node.as_array();
  if (!array) {
    throw RegistryError(where + ": expected an array of cell names");
  }
  std::vector<std::string> out;
  for (const auto& item : *array) {
    const auto* text = item.as_string();
    if (!text) {
      throw RegistryError(where + ": expected an array of strings");
    }
    out.push_back(text->get());
  }
  return out;
}

Registration registration_from_json(const nlohmann::json& j, const fs::path& dir) {
  Registration r;
  r.sha256 = j.at("sha256").get<std::string>();
  r.registered = j.at("registered").get<std::string>();
  r.who = j.at("who").get<std::string>();
  r.source = j.at("source").get<std::string>();
  r.retrospective = j.at("retrospective").get<bool>();
  r.outcome_cells = j.at("outcome_cells").get<std::vector<std::string>>();
  r.outcomes_present_at_registration = j.at("outcomes_present_at_registration").get<std::vector<std::string>>();
  r.frozen = dir / "analysis.toml";
  return r;
}

bool outcome_exists(const CellStatus& status) {
  return status.state == CellState::done || status.state == CellState::noncanonical;
}

std::string resolve_cell(const SweepStore& store, const std::string& key) {
  if (const auto* cell = store.find_by_name(key)) {
    return cell->name;
  }
  for (const auto& cell : store.cells()) {
    if (cell.id == key) {
      return cell.name;
    }
  }
  throw RegistryError("unknown cell \"" + key + "\" (not a cell name or id of the sweep " + store.dir().string() + ")");
}

// A registration whose files were written but whose journal entry was not (the registering process was killed in
// between): signed by the sweep's key, so only the runner made it; `register` of the same analysis journals it.
std::optional<Registration> finish_interrupted_registration(const SweepStore& store, const fs::path& dir) {
  const auto journaled = store.journaled_records();
  if (!journaled || journaled->registrations.count(dir.filename().string())) {
    return std::nullopt;
  }
  const std::string text = read_text(dir / "registration.json");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  if (!j.value("journaled", false) || !store.signature_problem(kRegistrationSchema, j).empty()) {
    return std::nullopt;
  }
  Registration r = registration_from_json(j, dir);
  if (r.sha256 != dir.filename().string() || !fs::is_regular_file(r.frozen) || sha256_file(r.frozen) != r.sha256) {
    return std::nullopt;
  }
  store.journal_record(
      {{"event", "register"}, {"analysis_sha256", r.sha256}, {"registration_sha256", sha256_hex(text)}});
  return r;
}

// Every group an analysis names must be a parameter group of the sweep's target runs: checked before freezing, so
// that a misspelt group is refused at `register` (naming the file, line and the known groups), not after every cell
// has run.
void check_analysis_groups(const SweepStore& store, const AnalysisSpec& spec, const fs::path& analysis,
                           const std::string& text) {
  if (spec.groups.empty()) {
    return;
  }
  std::set<std::string> known;
  for (const auto& cell : store.cells()) {
    if (cell.role != "target") {
      continue;
    }
    try {
      for (auto& name : sim::model_tensor_names(sim::run_config_from_json(cell.config).model)) {
        known.insert(std::move(name));
      }
    } catch (const std::exception&) {
      continue;  // the cell's own validation names the problem
    }
  }
  const std::vector<std::string> list(known.begin(), known.end());
  for (const auto& g : spec.groups) {
    if (known.count(g)) {
      continue;
    }
    int line = 0, number = 0;
    std::istringstream lines(text);
    for (std::string l; std::getline(lines, l);) {
      ++number;
      if (line == 0 && l.find("groups") != std::string::npos && l.find(g) != std::string::npos) {
        line = number;
      }
    }
    throw RegistryError("not registered: " + analysis.string() + (line ? ":" + std::to_string(line) : "") +
                        ": analysis.groups: \"" + g + "\" is not a parameter group of the sweep's target runs" +
                        util::did_you_mean(g, list) + " (known: " + util::join(list) + ")");
  }
}

}  // namespace

std::string current_user() {
  if (const char* user = std::getenv("USER"); user && *user) {
    return user;
  }
  if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_name) {
    return pw->pw_name;
  }
  return "uid " + std::to_string(::getuid());
}

std::vector<std::string> analysis_outcome_cells(const SweepStore& store, const fs::path& analysis) {
  toml::table table;
  const std::string text = read_text(analysis);
  try {
    table = toml::parse(text, analysis.string());
  } catch (const toml::parse_error& e) {
    std::ostringstream where;
    where << analysis.string() << ":" << e.source().begin.line << ": " << toml_error_description(e, text);
    throw RegistryError(where.str());
  }
  std::vector<std::string> patterns;
  std::string where;
  if (const auto* node = table.get("required_cells")) {
    where = analysis.string() + ": required_cells";
    patterns = string_array(*node, where);
  } else if (const auto* node = table.at_path("analysis.required_cells").node()) {
    where = analysis.string() + ": analysis.required_cells";
    patterns = string_array(*node, where);
  }
  std::vector<std::string> names;
  if (patterns.empty() && where.empty()) {
    for (const auto& cell : store.cells()) {
      if (cell.role == "target") {
        names.push_back(cell.name);
      }
    }
    return names;
  }
  std::set<std::string> seen;
  for (const auto& pattern : patterns) {
    bool matched = false;
    for (const auto& cell : store.cells()) {
      if (::fnmatch(pattern.c_str(), cell.name.c_str(), 0) == 0) {
        matched = true;
        if (seen.insert(cell.name).second) {
          names.push_back(cell.name);
        }
      }
    }
    if (!matched) {
      std::string message = where;
      message += ": \"" + pattern + "\" matches no cell of the sweep";
      throw RegistryError(message);
    }
  }
  return names;
}

Registration register_analysis(const SweepStore& store, const fs::path& analysis, bool retrospective,
                               const std::string& who) {
  const std::string text = read_text(analysis);
  // Validate fully before freezing: the append-only registry must never keep an analysis evaluate would refuse
  // (an unknown predictor, statistic or key, with its file:line).
  AnalysisSpec parsed;
  try {
    parsed = parse_analysis_spec(text, analysis);
  } catch (const std::exception& e) {
    throw RegistryError(std::string("not registered: ") + e.what());
  }
  check_analysis_groups(store, parsed, analysis, text);
  store.require_no_links("register an analysis in");
  // One writer of the registry at a time (two `register` of one analysis: the second finds the first's).
  const SweepLock records_lock = SweepLock::acquire_records(store.dir());
  Registration r;
  r.sha256 = sha256_hex(text);
  r.registered = utc_now();
  r.who = who.empty() ? current_user() : who;
  r.source = fs::absolute(analysis).string();
  r.retrospective = retrospective;
  r.outcome_cells = analysis_outcome_cells(store, analysis);
  const fs::path dir = store.dir() / "registry" / r.sha256;
  if (fs::exists(dir / "registration.json")) {
    if (auto finished = finish_interrupted_registration(store, dir)) {
      return *finished;
    }
    throw RegistryError("the analysis " + analysis.string() + " (hash " + r.sha256 + ") is already registered in " +
                        store.dir().string());
  }
  for (const auto& name : r.outcome_cells) {
    if (outcome_exists(store.cell_status(store.find_by_name(name)->id))) {
      r.outcomes_present_at_registration.push_back(name);
    }
  }
  if (!r.outcomes_present_at_registration.empty() && !retrospective) {
    std::string list;
    for (std::size_t i = 0; i < r.outcomes_present_at_registration.size() && i < 10; ++i) {
      list += (i ? ", " : "") + r.outcomes_present_at_registration[i];
    }
    if (r.outcomes_present_at_registration.size() > 10) {
      list += ", ... (" + std::to_string(r.outcomes_present_at_registration.size()) + " in all)";
    }
    throw RegistryError("cannot preregister " + analysis.string() + ": outcomes it names already exist (" + list +
                        "); register with --retrospective to label the analysis retrospective");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw RegistryError("cannot create " + dir.string() + ": " + ec.message());
  }
  r.frozen = dir / "analysis.toml";
  write_file_atomic(r.frozen, text);
  nlohmann::json record = {{"schema", kRegistrationSchema},
                           {"sha256", r.sha256},
                           {"registered", r.registered},
                           {"who", r.who},
                           {"source", r.source},
                           {"retrospective", r.retrospective},
                           {"outcome_cells", r.outcome_cells},
                           {"outcomes_present_at_registration", r.outcomes_present_at_registration},
                           {"sweep_spec_sha256", store.spec_sha256()}};
  if (store.can_verify()) {
    // Signed, so that its deletion is caught: the journal records it below (a registration that says so but is
    // not in the journal was cut out of it, or its registration was interrupted: `register` again finishes it).
    record["journaled"] = true;
    record["hmac"] = store.sign(kRegistrationSchema, record);
  }
  const std::string record_text = record.dump(1) + "\n";
  write_file_atomic(dir / "registration.json", record_text);
  if (store.can_verify()) {
    store.journal_record(
        {{"event", "register"}, {"analysis_sha256", r.sha256}, {"registration_sha256", sha256_hex(record_text)}});
  }
  return r;
}

std::vector<Registration> registrations(const fs::path& sweep_dir, const SweepStore* store) {
  std::vector<Registration> out;
  const fs::path root = sweep_dir / "registry";
  if (!fs::exists(root)) {
    return out;
  }
  const auto journaled = store ? store->journaled_records() : std::nullopt;
  for (const auto& entry : fs::directory_iterator(root)) {
    const fs::path file = entry.path() / "registration.json";
    if (!fs::exists(file)) {
      continue;  // an interrupted registration: nothing was registered
    }
    // A registration that cannot be read or checked is listed with the reason (never taken as registered) and the
    // others are still read.
    Registration r;
    r.sha256 = entry.path().filename().string();
    r.frozen = entry.path() / "analysis.toml";
    try {
      const std::string text = read_text(file);
      const nlohmann::json j = nlohmann::json::parse(text);
      r = registration_from_json(j, entry.path());
      if (store) {
        r.signature_problem = store->signature_problem(kRegistrationSchema, j);
      }
      if (r.signature_problem.empty() && journaled) {
        const auto it = journaled->registrations.find(r.sha256);
        if (it == journaled->registrations.end()) {
          if (j.value("journaled", false)) {
            r.signature_problem =
                "not in the journal (its journal entry was removed, or the registration was "
                "interrupted: `wbaudit register` of the same analysis finishes it)";
          }
        } else if (it->second != sha256_hex(text)) {
          r.signature_problem = "differs from the registration the journal recorded (edited)";
        }
      }
      if (r.sha256 != entry.path().filename().string()) {
        r.signature_problem = "registered hash " + r.sha256 + " is not its directory's name (moved or edited)";
      } else if (!fs::is_regular_file(r.frozen) || sha256_file(r.frozen) != r.sha256) {
        r.signature_problem = "the frozen analysis " + r.frozen.string() +
                              (fs::exists(r.frozen) ? " does not match its registered hash (edited)" : " is missing");
      }
    } catch (const std::exception& e) {
      r.signature_problem = "corrupt registration " + file.string() + ": " + e.what();
    }
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::tie(a.registered, a.sha256) < std::tie(b.registered, b.sha256);
  });
  return out;
}

std::vector<std::string> missing_registrations(const SweepStore& store) {
  std::vector<std::string> problems;
  const auto journaled = store.journaled_records();
  if (!journaled) {
    return problems;
  }
  for (const auto& [sha, registration_sha] : journaled->registrations) {
    const fs::path file = store.dir() / "registry" / sha / "registration.json";
    if (!fs::exists(file)) {
      problems.push_back("registration " + sha.substr(0, 12) + " is recorded in the journal but " + file.string() +
                         " is missing (deleted)");
    }
  }
  return problems;
}

std::optional<Registration> find_registration(const fs::path& sweep_dir, const std::string& analysis_text,
                                              const SweepStore* store) {
  const std::string digest = sha256_hex(analysis_text);
  for (auto& r : registrations(sweep_dir, store)) {
    if (r.sha256 == digest) {
      return r;
    }
  }
  return std::nullopt;
}

std::vector<CellProblem> required_cell_problems(const SweepStore& store, const Registration& registration) {
  std::vector<CellProblem> problems;
  for (const auto& name : registration.outcome_cells) {
    const auto* cell = store.find_by_name(name);
    if (!cell) {
      problems.push_back({name, "not a cell of this sweep"});
      continue;
    }
    const CellStatus status = store.cell_status(cell->id);
    if (status.state == CellState::done) {
      continue;
    }
    std::string reason = to_string(status.state);
    if (status.state == CellState::pending) {
      reason = "missing";
    }
    if (!status.reasons.empty()) {
      reason += ": " + status.reasons.front();
    }
    problems.push_back({name, reason});
  }
  return problems;
}

namespace {

// Appends bytes to the deviation log with one write(2) on an O_APPEND descriptor that does not follow a link, then
// fsyncs it.
void append_to_log(const fs::path& log, const std::string& line) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw RegistryError("cannot open " + log.string() + ": " +
                        (errno == ELOOP ? std::string("it is a symbolic link") : std::string(std::strerror(errno))));
  }
  const ssize_t n = ::write(fd, line.data(), line.size());
  const int saved = errno;
  const bool synced = n == static_cast<ssize_t>(line.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) {
    throw RegistryError("cannot append to " + log.string() + ": " + std::strerror(n < 0 ? saved : errno));
  }
}

std::size_t count_lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

Deviation record_deviation(const SweepStore& store, const std::string& what, const std::string& why,
                           const std::vector<std::string>& cells, const std::string& who) {
  if (why.empty()) {
    throw RegistryError("a deviation needs a reason (--reason)");
  }
  Deviation d;
  d.who = who.empty() ? current_user() : who;
  d.when = utc_now();
  d.what = what;
  d.why = why;
  for (const auto& key : cells) {
    d.cells.push_back(resolve_cell(store, key));
  }
  store.require_no_links("record a deviation in");
  // One appender at a time: two `deviate` reading the same log end would both chain to it.
  const SweepLock records_lock = SweepLock::acquire_records(store.dir());
  const fs::path log = store.dir() / "deviations.jsonl";
  (void)read_deviations(store.dir(), &store);  // refuse to extend a log that was edited or cut
  const std::string before = fs::exists(log) ? read_text(log) : std::string();
  nlohmann::json entry = {{"schema", kDeviationSchema},
                          {"who", d.who},
                          {"when", d.when},
                          {"what", d.what},
                          {"why", d.why},
                          {"cells", d.cells},
                          {"prev_sha256", sha256_hex(before)}};
  if (store.can_verify()) {
    entry["hmac"] = store.sign(kDeviationSchema, entry);
  }
  const std::string line = entry.dump() + "\n";
  append_to_log(log, line);
  d.line = static_cast<int>(count_lines(before)) + 1;
  if (store.can_verify()) {
    // The journal signs the log's new end: removing entries from it (or the whole log) contradicts the journal.
    store.journal_record(
        {{"event", "deviation"}, {"lines", count_lines(before) + 1}, {"log_sha256", sha256_hex(before + line)}});
  }
  return d;
}

std::vector<Deviation> read_deviations(const fs::path& sweep_dir, const SweepStore* store) {
  std::vector<Deviation> out;
  const fs::path log = sweep_dir / "deviations.jsonl";
  const auto journaled = store ? store->journaled_records() : std::nullopt;
  const auto recorded = journaled ? journaled->deviations : std::nullopt;
  if (fs::is_symlink(log)) {
    throw RegistryError(log.string() + " is a symbolic link (wbaudit never reads or writes records through links)");
  }
  if (!fs::exists(log)) {
    if (recorded && recorded->first > 0) {
      throw RegistryError(log.string() + " is missing, but the journal recorded " + std::to_string(recorded->first) +
                          " deviation(s): the log was deleted");
    }
    return out;
  }
  const std::string text = read_text(log);
  std::size_t pos = 0;
  int line_number = 0;
  while (pos < text.size()) {
    ++line_number;
    const std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) {
      throw RegistryError(log.string() + ":" + std::to_string(line_number) + ": truncated entry (no newline)");
    }
    if (recorded && static_cast<std::size_t>(line_number) == recorded->first &&
        sha256_hex(std::string_view(text).substr(0, end + 1)) != recorded->second) {
      throw RegistryError(log.string() + ": its first " + std::to_string(recorded->first) +
                          " entries differ from those the journal recorded (the log was edited or replaced)");
    }
    try {
      const auto j = nlohmann::json::parse(text.substr(pos, end - pos));
      if (j.at("prev_sha256").get<std::string>() != sha256_hex(std::string_view(text).substr(0, pos))) {
        throw RegistryError(log.string() + ":" + std::to_string(line_number) +
                            ": hash chain broken (the log was edited before this entry; the key holder can "
                            "`wbaudit deviate DIR --repair-log --reason ...`)");
      }
      out.push_back({j.at("who").get<std::string>(), j.at("when").get<std::string>(), j.at("what").get<std::string>(),
                     j.at("why").get<std::string>(), j.at("cells").get<std::vector<std::string>>(), line_number,
                     store ? store->signature_problem(kDeviationSchema, j) : std::string()});
    } catch (const nlohmann::json::exception& e) {
      throw RegistryError(log.string() + ":" + std::to_string(line_number) + ": corrupt entry: " + e.what());
    }
    pos = end + 1;
  }
  if (recorded && out.size() < recorded->first) {
    throw RegistryError(log.string() + " has " + std::to_string(out.size()) + " entries, but the journal recorded " +
                        std::to_string(recorded->first) + ": entries were removed from its end");
  }
  return out;
}

DeviationRepair repair_deviation_log(const SweepStore& store, const std::string& why, const std::string& who) {
  if (why.empty()) {
    throw RegistryError("a repair of the deviation log needs a reason (--reason)");
  }
  store.require_key("repair the deviation log of");
  store.require_no_links("repair the deviation log of");
  const SweepLock records_lock = SweepLock::acquire_records(store.dir());
  const fs::path log = store.dir() / "deviations.jsonl";
  const std::string text = fs::exists(log) ? read_text(log) : std::string();
  DeviationRepair repair;
  std::string rebuilt;
  std::istringstream lines(text);
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
    }
    // Only entries the key holder signed are kept (their content unchanged), chained and signed again.
    if (!j.is_object() || !store.signature_problem(kDeviationSchema, j).empty()) {
      repair.dropped.push_back({number, sha256_hex(line)});
      continue;
    }
    j["prev_sha256"] = sha256_hex(rebuilt);
    j["hmac"] = store.sign(kDeviationSchema, j);
    rebuilt += j.dump() + "\n";
    ++repair.kept;
  }
  std::string dropped;
  for (const auto& [n, sha] : repair.dropped) {
    dropped += (dropped.empty() ? "" : ", ") + std::to_string(n);
  }
  nlohmann::json entry = {
      {"schema", kDeviationSchema},
      {"who", who.empty() ? current_user() : who},
      {"when", utc_now()},
      {"what", "repaired the deviation log: kept " + std::to_string(repair.kept) + " signed entries" +
                   (dropped.empty() ? std::string() : ", dropped lines " + dropped)},
      {"why", why},
      {"cells", nlohmann::json::array()},
      {"prev_sha256", sha256_hex(rebuilt)}};
  entry["hmac"] = store.sign(kDeviationSchema, entry);
  rebuilt += entry.dump() + "\n";
  write_file_atomic(log, rebuilt);
  nlohmann::json dropped_json = nlohmann::json::array();
  for (const auto& [n, sha] : repair.dropped) {
    dropped_json.push_back({{"line", n}, {"sha256", sha}});
  }
  store.journal_record({{"event", "deviation-repair"},
                        {"lines", count_lines(rebuilt)},
                        {"log_sha256", sha256_hex(rebuilt)},
                        {"previous_log_sha256", sha256_hex(text)},
                        {"dropped", dropped_json}});
  repair.lines = count_lines(rebuilt);
  return repair;
}

}  // namespace wbaudit::runners
