#include "runners/external_run.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "runners/identity.hpp"
#include "runners/store.hpp"
#include "sim/trace/trace.hpp"

namespace wbaudit::runners {
namespace fs = std::filesystem;

namespace {

bool valid_name(const std::string& name) {
  return !name.empty() && name.size() <= 128 && name[0] != '.' && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '=';
  });
}

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

ExternalRun import_external_run(const fs::path& sweep_dir, const fs::path& trace_path, const ImportOptions& options) {
  const sim::Trace trace = sim::read_trace(trace_path);  // throws naming the file for anything but a trace
  const std::string sha = sha256_file(trace_path);
  const std::string role = trace.mode == "reference" ? "reference" : "target";
  const std::string name =
      options.name ? *options.name : role + "-" + trace.format + "-" + trace.policy + "-" + sha.substr(0, 8);
  if (!valid_name(name)) {
    throw StoreError("import: run name \"" + name + "\" is not valid (letters, digits, - _ . =; not starting with .)");
  }
  nlohmann::json provenance = nlohmann::json::object();
  try {
    provenance = nlohmann::json::parse(trace.config_json);
  } catch (const nlohmann::json::exception&) {
    provenance = {{"config_json", trace.config_json}};
  }
  const fs::path external = sweep_dir / "external";
  const fs::path dest = external / name;
  if (fs::exists(dest)) {
    throw StoreError("import: " + dest.string() + " already exists (an import never overwrites; choose --name)");
  }
  std::string origin = "external run imported by `wbaudit import` from " + fs::absolute(trace_path).string() +
                       "; not produced by wbaudit's runner from a registered sweep";
  if (provenance.contains("script")) {
    origin += " (script " + provenance.value("script", std::string()) + ", sha256 " +
              provenance.value("script_sha256", std::string()).substr(0, 12) + ", torch " +
              provenance.value("torch_version", std::string()) + ")";
  }
  nlohmann::json manifest = {{"schema", kExternalSchema},
                             {"name", name},
                             {"role", role},
                             {"mode", trace.mode},
                             {"format", trace.format},
                             {"policy", trace.policy},
                             {"seed", trace.seed},
                             {"steps", trace.steps},
                             {"groups", nlohmann::json::array()},
                             {"imported_from", fs::absolute(trace_path).string()},
                             {"imported_at", utc_now()},
                             {"imported_on", host_name()},
                             {"files", {{"trace.h5", sha}}},
                             {"provenance", provenance},
                             {"canonical", false},
                             {"noncanonical_reason", origin}};
  for (const auto& g : trace.groups) {
    manifest["groups"].push_back(g.name);
  }
  if (!options.note.empty()) {
    manifest["note"] = options.note;
  }
  fs::create_directories(external);
  const fs::path staging = external / ("." + name + ".tmp." + std::to_string(::getpid()));
  fs::remove_all(staging);
  try {
    fs::create_directories(staging);
    fs::copy_file(trace_path, staging / "trace.h5");
    if (sha256_file(staging / "trace.h5") != sha) {
      throw StoreError("import: the copy of " + trace_path.string() + " differs from the original");
    }
    write_file_atomic(staging / "manifest.json", manifest.dump(2) + "\n");
    fs::rename(staging, dest);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(staging, ec);
    throw;
  }
  return ExternalRun{name, dest, manifest, true, ""};
}

std::vector<ExternalRun> external_runs(const fs::path& sweep_dir) {
  std::vector<ExternalRun> runs;
  const fs::path external = sweep_dir / "external";
  if (!fs::is_directory(external)) {
    return runs;
  }
  for (const auto& entry : fs::directory_iterator(external)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.empty() || name[0] == '.') {
      continue;
    }
    ExternalRun run;
    run.name = name;
    run.dir = entry.path();
    std::ifstream in(entry.path() / "manifest.json");
    try {
      run.manifest = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      run.problem = "manifest.json unreadable: " + std::string(e.what());
      runs.push_back(std::move(run));
      continue;
    }
    const fs::path trace = entry.path() / "trace.h5";
    const std::string want = run.manifest.value("/files/trace.h5"_json_pointer, std::string());
    if (run.manifest.value("schema", std::string()) != kExternalSchema) {
      run.problem = "manifest schema is not " + std::string(kExternalSchema);
    } else if (!fs::exists(trace)) {
      run.problem = "trace.h5 missing";
    } else if (sha256_file(trace) != want) {
      run.problem = "trace.h5 changed since the import (SHA-256 differs from the recorded one)";
    } else {
      run.intact = true;
    }
    runs.push_back(std::move(run));
  }
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return runs;
}

}  // namespace wbaudit::runners
