#include "runners/registry.hpp"

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

#include "runners/analysis_spec.hpp"
#include "runners/identity.hpp"
#include "runners/toml_error.hpp"

namespace wbaudit::runners {
namespace fs = std::filesystem;
namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw RegistryError("cannot read " + path.string());
  }
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
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
  try {
    (void)parse_analysis_spec(text, analysis);
  } catch (const std::exception& e) {
    throw RegistryError(std::string("not registered: ") + e.what());
  }
  Registration r;
  r.sha256 = sha256_hex(text);
  r.registered = utc_now();
  r.who = who.empty() ? current_user() : who;
  r.source = fs::absolute(analysis).string();
  r.retrospective = retrospective;
  r.outcome_cells = analysis_outcome_cells(store, analysis);
  const fs::path dir = store.dir() / "registry" / r.sha256;
  if (fs::exists(dir / "registration.json")) {
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
  if (store.can_verify()) record["hmac"] = store.sign(kRegistrationSchema, record);
  write_file_atomic(dir / "registration.json", record.dump(1) + "\n");
  return r;
}

std::vector<Registration> registrations(const fs::path& sweep_dir, const SweepStore* store) {
  std::vector<Registration> out;
  const fs::path root = sweep_dir / "registry";
  if (!fs::exists(root)) {
    return out;
  }
  for (const auto& entry : fs::directory_iterator(root)) {
    const fs::path file = entry.path() / "registration.json";
    if (!fs::exists(file)) {
      continue;  // an interrupted registration: nothing was registered
    }
    try {
      const nlohmann::json j = nlohmann::json::parse(read_text(file));
      Registration r = registration_from_json(j, entry.path());
      if (store) r.signature_problem = store->signature_problem(kRegistrationSchema, j);
      if (sha256_file(r.frozen) != r.sha256) {
        throw RegistryError("frozen analysis " + r.frozen.string() + " does not match its registered hash");
      }
      out.push_back(std::move(r));
    } catch (const nlohmann::json::exception& e) {
      throw RegistryError(file.string() + ": corrupt registration: " + e.what());
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.registered < b.registered; });
  return out;
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
  const fs::path log = store.dir() / "deviations.jsonl";
  (void)read_deviations(store.dir());  // refuse to extend a log that was edited
  const std::string before = fs::exists(log) ? read_text(log) : std::string();
  nlohmann::json entry = {{"schema", kDeviationSchema},
                          {"who", d.who},
                          {"when", d.when},
                          {"what", d.what},
                          {"why", d.why},
                          {"cells", d.cells},
                          {"prev_sha256", sha256_hex(before)}};
  if (store.can_verify()) entry["hmac"] = store.sign(kDeviationSchema, entry);
  const std::string line = entry.dump() + "\n";
  const int fd = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw RegistryError("cannot open " + log.string() + ": " + std::strerror(errno));
  }
  const ssize_t n = ::write(fd, line.data(), line.size());
  const int saved = errno;
  const bool synced = n == static_cast<ssize_t>(line.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) {
    throw RegistryError("cannot append to " + log.string() + ": " + std::strerror(n < 0 ? saved : errno));
  }
  return d;
}

std::vector<Deviation> read_deviations(const fs::path& sweep_dir, const SweepStore* store) {
  std::vector<Deviation> out;
  const fs::path log = sweep_dir / "deviations.jsonl";
  if (!fs::exists(log)) {
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
    try {
      const auto j = nlohmann::json::parse(text.substr(pos, end - pos));
      if (j.at("prev_sha256").get<std::string>() != sha256_hex(std::string_view(text).substr(0, pos))) {
        throw RegistryError(log.string() + ":" + std::to_string(line_number) +
                            ": hash chain broken (the log was edited before this entry)");
      }
      out.push_back({j.at("who").get<std::string>(), j.at("when").get<std::string>(), j.at("what").get<std::string>(),
                     j.at("why").get<std::string>(), j.at("cells").get<std::vector<std::string>>(), line_number,
                     store ? store->signature_problem(kDeviationSchema, j) : std::string()});
    } catch (const nlohmann::json::exception& e) {
      throw RegistryError(log.string() + ":" + std::to_string(line_number) + ": corrupt entry: " + e.what());
    }
    pos = end + 1;
  }
  return out;
}

}  // namespace wbaudit::runners
