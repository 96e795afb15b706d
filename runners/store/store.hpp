#pragma once
// The sweep directory (docs/contracts.md): frozen spec and executable with their hashes, the cell list, and one
// directory per attempt whose manifest.json (written atomically) records identity, provenance and the SHA-256 of
// every file the attempt wrote. Completion and canonicity are decided from this content, never from a scheduler.
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace wbaudit::runners {

inline constexpr const char* kSweepSchema = "wbaudit.sweep/1";
inline constexpr const char* kManifestSchema = "wbaudit.attempt/1";

class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One cell as stored in sweep.json. `id` is filled by SweepStore::create from the configuration (cell_id).
// NOLINTNEXTLINE(bugprone-exception-escape): its implicit move of nlohmann::json (not noexcept in the check's view)
struct StoredCell {
  std::string id;
  std::string name;       // unique in the sweep
  std::string role;       // "reference" or "target"
  std::string reference;  // targets: name of their reference cell ("" for references)
  nlohmann::json config;  // the cell configuration (docs/contracts.md), with "schema"
};

struct CreateOptions {
  bool resume = false;  // reopen an existing sweep directory (the spec text must be byte-identical)
  // Executable frozen into DIR/bin/wbaudit; empty: this process' executable (/proc/self/exe).
  std::filesystem::path executable;
};

enum class AttemptStatus { running, complete, failed };
std::string to_string(AttemptStatus status);

// What a manifest.json says, plus what checking it against the directory found.
// NOLINTNEXTLINE(bugprone-exception-escape): implicit members of nlohmann::json/path members, as for any value type
struct AttemptRecord {
  std::string uuid;
  std::filesystem::path dir;
  bool manifest_valid = false;  // parsed, right schema, required fields present
  AttemptStatus status = AttemptStatus::running;
  std::string exit_reason;
  std::string start;  // ISO 8601 UTC
  std::string end;
  nlohmann::json manifest;           // raw content (null when unreadable)
  bool complete = false;             // status complete and every listed file present with its hash
  bool canonical = false;            // complete, registered spec, registered binary, the right cell
  std::vector<std::string> reasons;  // why not complete / not canonical (empty when canonical)
};

enum class CellState { pending, running, failed, noncanonical, done };
std::string to_string(CellState state);

struct CellStatus {
  const StoredCell* cell = nullptr;
  CellState state = CellState::pending;
  std::vector<AttemptRecord> attempts;           // ordered by start time, then uuid
  std::optional<std::size_t> canonical_attempt;  // index into attempts of the newest canonical complete one
  std::vector<std::string> reasons;              // for noncanonical / failed / running: why
  // Attempt directories the journal never heard of (copied in or made by hand), beside a canonical attempt: the
  // cell is done, but `status --check` fails until they are gone (`run --resume` moves them to DIR/foreign/).
  std::vector<std::string> foreign;
  bool needs_run() const { return state != CellState::done; }
};

// An attempt in progress: its directory exists and manifest.json says "running".
// NOLINTNEXTLINE(bugprone-exception-escape): implicit members of nlohmann::json/path members, as for any value type
class Attempt {
 public:
  const std::string& cell_id() const { return m_cell_id; }
  const std::string& uuid() const { return m_uuid; }
  const std::filesystem::path& dir() const { return m_dir; }

 private:
  friend class SweepStore;
  std::string m_cell_id;
  std::string m_uuid;
  std::filesystem::path m_dir;
  nlohmann::json m_manifest;
};

struct SigningState;  // the sweep's key and the journal's index (runners/store/journal.hpp), shared by copies

// NOLINTNEXTLINE(bugprone-exception-escape): the implicit move constructor's std::map members are not noexcept
class SweepStore {
 public:
  // Creates DIR (refused when it exists, unless options.resume) with spec.toml, bin/wbaudit, journal.jsonl and
  // sweep.json, and the sweep's signing key outside it (runners/store/journal.hpp).
  // With resume: refuses a spec whose text differs from the frozen one (hash shown), a sweep whose key is absent or
  // whose record (journal, sweep.json) was edited; repairs a missing or modified spec.toml from the given spec text
  // (its hash is the registered one) and a missing or modified bin/wbaudit from this executable when its hash is
  // the registered one, and refuses otherwise; the same for each frozen library in bin/lib/ from the library this
  // process loaded. repairs() lists what was repaired.
  static SweepStore create(const std::filesystem::path& dir, const std::string& spec_text,
                           std::vector<StoredCell> cells, const CreateOptions& options = {});
  // Opens an existing sweep directory (reads sweep.json; checks nothing else).
  static SweepStore open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return m_dir; }
  const std::vector<StoredCell>& cells() const { return m_cells; }
  const StoredCell& cell(const std::string& id) const;  // throws StoreError naming the id
  const StoredCell* find_by_name(const std::string& name) const;
  const std::string& spec_sha256() const { return m_spec_sha256; }
  const std::string& binary_sha256() const { return m_binary_sha256; }
  const std::string& created() const { return m_created; }
  std::filesystem::path spec_path() const { return m_dir / "spec.toml"; }
  std::filesystem::path executable_path() const { return m_dir / "bin" / "wbaudit"; }
  // The executable's shared libraries from outside the system directories, frozen beside it
  // (runners/store/identity.hpp: non_system_libraries), by file name with their SHA-256 as registered in sweep.json.
  // Empty for sweeps made before libraries were frozen, or created with CreateOptions::executable (whose libraries this
  // process does not know).
  std::filesystem::path library_dir() const { return m_dir / "bin" / "lib"; }
  const std::map<std::string, std::string>& libraries() const { return m_libraries; }
  // Problems with the frozen inputs (missing/changed spec.toml, bin/wbaudit or a library in bin/lib/); empty when
  // intact.
  std::vector<std::string> check_frozen_inputs() const;

  // Signed provenance (runners/store/journal.hpp). The sweep's uuid (empty for sweeps made before signing), whether its
  // key was found (key_problem() says why not), the journal's path.
  const std::string& sweep_uuid() const { return m_sweep_uuid; }
  bool can_verify() const;
  const std::string& key_problem() const;
  // Throws StoreError ("cannot <what> the sweep DIR without its signing key: ...") unless can_verify().
  void require_key(const std::string& what) const;
  // The sweep's other signed records (the registry, the deviation log; runners/store/registry.hpp): sign() is the HMAC
  // of `value` under the sweep's key (journal.hpp sign_json; throws StoreError without the key); signature_problem() is
  // empty when value["hmac"] is that signature, else why not ("cannot be verified: ..." without the key).
  std::string sign(const std::string& context, const nlohmann::json& value) const;
  std::string signature_problem(const std::string& context, const nlohmann::json& value) const;
  // Where the key was found (or is looked for).
  std::filesystem::path key_path() const;
  std::filesystem::path journal_path() const { return m_dir / "journal.jsonl"; }
  // Edited, removed or forged journal entries, and a sweep.json that differs from its signed creation record; empty
  // when intact or when the key is absent (then nothing can be checked: see key_problem()).
  std::vector<std::string> check_record() const;
  // A note when the journal ends in a torn line (a runner killed while appending; the next append drops it).
  bool journal_torn_tail() const;
  // What the journal signs the end of (runners/store/journal.hpp JournalIndex): registrations, the deviation log's
  // length and hash, the derived outputs. nullopt without the key.
  struct JournaledRecords {
    std::map<std::string, std::string> registrations;  // analysis SHA-256 -> SHA-256 of its registration.json
    std::optional<std::pair<std::size_t, std::string>> deviations;  // (lines, SHA-256 of deviations.jsonl)
    std::map<std::string, std::string> outputs;                     // path relative to DIR -> SHA-256
  };
  std::optional<JournaledRecords> journaled_records() const;
  // Appends a signed entry ({"event": ..., ...}) to the journal. Throws StoreError without the key.
  void journal_record(nlohmann::json entry) const;
  // Symbolic links inside the sweep directory (never followed by wbaudit, never made by it: each names a path a
  // writer would be redirected through); empty when there are none. Writers refuse (require_no_links), status lists
  // them.
  std::vector<std::string> link_problems() const;
  // Throws StoreError ("cannot <what> DIR: ... is a symbolic link ...") when link_problems() is not empty.
  void require_no_links(const std::string& what) const;
  // Canonical attempts that ran under another numeric contract (sim/numeric_identity.hpp: the GEMM's summation
  // contract and the C library's maths variant) than the one sweep.json records, one line each; empty for sweeps made
  // before numeric identities were recorded. (ISA paths may differ: their results are identical by construction.)
  std::vector<std::string> numeric_problems(const std::vector<CellStatus>& statuses) const;
  // Directories under DIR/cells/ that are not cells of this sweep.
  std::vector<std::string> unknown_cell_directories() const;
  // The derived outputs (summary.csv, trajectories.csv and every file under report/): record_outputs() signs their
  // hashes into the journal after they were written (nothing without the key); output_problems() names each that
  // differs from, or is missing from, or was added to what was recorded last (none when nothing was recorded).
  void record_outputs() const;
  std::vector<std::string> output_problems() const;
  // Temporaries left by killed processes (a trace.h5.tmp.<pid> in an attempt that is not running, report files
  // ending in .tmp, .<name>.tmp.<pid> of a process no longer alive on this host); returns one line per file removed.
  // Call with the sweep lock held.
  std::vector<std::string> remove_leftover_temporaries() const;
  // Moves attempt directories the journal never heard of to DIR/foreign/<cell id>/<name>; returns one line per
  // directory moved. Call with the sweep lock held.
  std::vector<std::string> set_aside_foreign() const;
  // Extends the sweep by cells a changed spec adds (runners/store/extend.hpp plan_extension): refused without the key,
  // with links inside, with an edited record or changed frozen inputs. Keeps the previous spec as
  // DIR/specs/<its SHA-256>.toml, appends a signed "extend" entry to the journal (the new sweep.json's SHA-256, both
  // spec hashes, the added cell ids), then rewrites sweep.json (the cells appended, "spec_sha256" the new spec's,
  // "extensions" listing each extension) and spec.toml. Attempts that ran under a previous spec stay canonical. This
  // object is not updated: open the sweep again.
  // `renamed`: (cell id, new name) of existing cells the new spec names otherwise, refused when registered analyses or
  // deviations (which name cells) exist.
  void extend(const std::string& spec_text, const std::vector<StoredCell>& added,
              const std::vector<std::pair<std::string, std::string>>& renamed) const;
  // The SHA-256 of the specs before each extension, oldest first (empty for a sweep never extended).
  const std::vector<std::string>& previous_specs() const { return m_previous_specs; }
  // What create(resume) repaired (one line each).
  const std::vector<std::string>& repairs() const { return m_repairs; }

  // Starts an attempt: creates cells/<id>/attempts/<uuid>/ and an atomic manifest with status "running".
  Attempt begin_attempt(const std::string& cell_id) const;
  // Hashes the files, relative to the attempt directory, then atomically rewrites the manifest with
  // status complete or failed. A file that is missing turns a complete attempt into a failed one.
  AttemptRecord finish_attempt(Attempt& attempt, AttemptStatus status, const std::string& exit_reason,
                               const std::vector<std::string>& files) const;

  // Marks the attempt cells/<cell_id>/attempts/<uuid> of a process that died while running it (its manifest still
  // says "running") as failed with the given reason, e.g. "worker process 4711 was killed by signal 9 (Killed) while
  // running the cell", so that `status` shows why without relying on the pid being gone. An attempt that is not
  // running is left as it is. Throws StoreError for a malformed uuid or a missing or unreadable manifest.
  AttemptRecord fail_abandoned_attempt(const std::string& cell_id, const std::string& uuid,
                                       const std::string& reason) const;

  AttemptRecord read_attempt(const std::filesystem::path& attempt_dir, const std::string& cell_id) const;
  CellStatus cell_status(const std::string& cell_id) const;
  std::vector<CellStatus> status() const;  // in cells() order

 private:
  std::filesystem::path m_dir;
  std::vector<StoredCell> m_cells;
  std::map<std::string, std::size_t> m_index;
  std::map<std::string, std::size_t> m_by_name;  // cell name -> position in m_cells
  std::string m_spec_sha256;
  std::vector<std::string> m_previous_specs;  // sweep.json "extensions"[*].previous_spec_sha256
  std::string m_binary_sha256;
  std::map<std::string, std::string> m_libraries;  // bin/lib/<name> -> sha256
  bool m_has_libraries = false;                    // sweep.json lists its libraries (possibly none)
  std::string m_created;
  std::string m_sweep_uuid;
  std::string m_sweep_json_sha256;  // of the bytes of sweep.json read by open()
  nlohmann::json m_numeric;         // sweep.json "numeric" (null for older sweeps)
  std::vector<std::string> m_repairs;
  std::shared_ptr<SigningState> m_signing;

  void load_key();
  // The steps of create(): with resume, the checks and the repairs of the frozen inputs; for a new sweep, its cells,
  // its frozen binary and the text of its sweep.json.
  void check_resumable(const std::string& spec_sha256) const;
  void repair_frozen_inputs(const std::string& spec_text, const std::filesystem::path& executable,
                            const std::string& executable_sha256);
  void repair_frozen_libraries();
  void set_new_cells(std::vector<StoredCell> cells);
  nlohmann::json freeze_binary(const std::filesystem::path& executable, const std::string& executable_sha256,
                               bool with_libraries);
  std::string sweep_record_text(const nlohmann::json& libraries) const;
  // The checks of read_attempt() on a complete attempt; each adds its findings to record.reasons.
  bool check_signed_and_journaled(AttemptRecord& record, const std::string& cell_id) const;
  void check_trace_is_cells(AttemptRecord& record, const std::string& cell_id) const;
  void check_manifest_identity(AttemptRecord& record, const std::string& cell_id) const;
  struct JournalView {
    bool begun = false;
    std::size_t entries = 0;
    std::vector<std::string> finished;  // manifest hashes of the attempt's finish entries
  };
  JournalView journal_view(const std::string& cell_id, const std::string& uuid) const;
  void sign_and_write_manifest(const std::filesystem::path& dir, nlohmann::json& manifest, bool journal_finish) const;
};

// util::write_atomic (a temporary in the same directory, then rename; durable: fsync'ed), its failures as StoreError
// naming the path and errno text (e.g. a full disk).
//
// Attempt manifests are written without fsync (about 15 ms per cell on an ordinary disk): a crash can at worst
// lose or truncate a manifest, which every reader detects (no manifest, corrupt manifest, or file hashes that do not
// match) and --resume reruns; nothing torn can pass as complete. sweep.json, spec.toml, the executable copy and
// registrations are durable.
void write_file_atomic(const std::filesystem::path& path, const std::string& bytes, bool durable = true);
// util::read_text (a regular file, opened without blocking: a FIFO or device planted where a record belongs is
// refused, never waited on), its failures as StoreError naming the path.
std::string read_regular_file(const std::filesystem::path& path);
// Current UTC time, ISO 8601 with milliseconds.
std::string utc_now();

}  // namespace wbaudit::runners
