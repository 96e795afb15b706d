#pragma once
// Preregistration and deviations. `register` freezes an analysis spec (predictors, gates, required cells, bootstrap
// settings) inside the sweep directory with its hash and time before the outcomes it names exist; `deviate` appends
// to an append-only, hash-chained deviation log. Layout (docs/contracts.md):
//   DIR/registry/<sha256>/analysis.toml      the frozen analysis, byte for byte
//   DIR/registry/<sha256>/registration.json  hash, time, who, source path, retrospective flag, the outcome cells
//   DIR/deviations.jsonl                     one JSON object per line; each carries the SHA-256 of the log before it
// Both registration.json and each deviation entry carry an HMAC-SHA256 under the sweep's key ("hmac",
// runners/store/journal.hpp) when the key is present, so that status and evaluate flag an edited or hand-made one.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runners/store/store.hpp"

namespace wbaudit::runners {

inline constexpr const char* kRegistrationSchema = "wbaudit.registration/1";
inline constexpr const char* kDeviationSchema = "wbaudit.deviation/1";

class RegistryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The outcome cells an analysis names: its `required_cells` array (top level or in an [analysis] table) of cell
// names or shell-style patterns ("target/e4m3/*"); without one, every target cell of the sweep. Each pattern must
// match at least one cell. Throws RegistryError naming the file and the key.
std::vector<std::string> analysis_outcome_cells(const SweepStore& store, const std::filesystem::path& analysis);

struct Registration {
  std::string sha256;
  std::string registered;  // ISO 8601 UTC
  std::string who;
  std::string source;
  bool retrospective = false;
  std::vector<std::string> outcome_cells;                     // names
  std::vector<std::string> outcomes_present_at_registration;  // names (non-empty only when retrospective)
  std::filesystem::path frozen;                               // DIR/registry/<sha256>/analysis.toml
  // Empty when registration.json is signed by the sweep's key (SweepStore::signature_problem), else why not;
  // also empty when registrations() was not given the store (nothing checked).
  std::string signature_problem;
};

// Freezes the analysis. Refuses (RegistryError listing the cells) when any outcome cell already has an attempt that
// reached completion, unless retrospective; refuses an analysis already registered in this sweep.
Registration register_analysis(const SweepStore& store, const std::filesystem::path& analysis, bool retrospective,
                               const std::string& who = "");

// Every registration directory of the sweep. With `store`, each registration's signature and journal entry are
// checked (Registration::signature_problem). A registration that cannot be read, or whose frozen analysis differs
// from its hash, is listed with that problem (and never counts as registered); nothing throws for one.
std::vector<Registration> registrations(const std::filesystem::path& sweep_dir, const SweepStore* store = nullptr);
// Registrations the journal records whose files are gone (deleted), one line each; empty without the key.
std::vector<std::string> missing_registrations(const SweepStore& store);
// The registration of this analysis text (by hash), if any.
std::optional<Registration> find_registration(const std::filesystem::path& sweep_dir, const std::string& analysis_text,
                                              const SweepStore* store = nullptr);

struct CellProblem {
  std::string cell;    // name
  std::string reason;  // "missing", "failed: ...", "non-canonical: ..."
};
// Outcome cells of a registration that are not canonical and complete (evaluate marks gates inconclusive then).
std::vector<CellProblem> required_cell_problems(const SweepStore& store, const Registration& registration);

struct Deviation {
  std::string who;
  std::string when;
  std::string what;
  std::string why;
  std::vector<std::string> cells;  // names
  int line = 0;                    // in deviations.jsonl
  std::string signature_problem;   // as Registration::signature_problem
};

// Appends one entry (O_APPEND, one write, fsync) under the sweep's records lock (runners/store/lock.hpp), then
// records the log's new length and hash in the journal. Cells may be given by name or id; unknown cells are an error.
Deviation record_deviation(const SweepStore& store, const std::string& what, const std::string& why,
                           const std::vector<std::string>& cells, const std::string& who = "");
// Reads and verifies the log: every line parses and its prev_sha256 matches the bytes before it; a broken chain or
// a truncated/edited log is a RegistryError naming the line.
// With `store`, each entry's signature is checked too (Deviation::signature_problem): an edited last entry, which
// no later prev_sha256 covers, or an entry appended by hand; and the log against the length and hash the journal
// recorded last: a log cut short, emptied, deleted or replaced is a RegistryError.
std::vector<Deviation> read_deviations(const std::filesystem::path& sweep_dir, const SweepStore* store = nullptr);

// The key holder's repair of a deviation log whose chain broke (or that holds entries nobody signed): the entries
// signed by the sweep's key are kept in order, unchanged but for their chain and signature, the others dropped, and
// a deviation recording the repair (what was dropped, the reason) is appended, so analyses under it are
// retrospective; written atomically and recorded in the journal with the dropped lines' hashes.
struct DeviationRepair {
  std::size_t kept = 0;
  std::vector<std::pair<int, std::string>> dropped;  // (line, SHA-256 of its text)
  std::size_t lines = 0;                             // of the repaired log
};
DeviationRepair repair_deviation_log(const SweepStore& store, const std::string& why, const std::string& who = "");

// The invoking user ($USER, else the passwd name of the uid, else "uid <n>").
std::string current_user();

}  // namespace wbaudit::runners
