#pragma once
// Canonical identity that only the runner produces (docs/contracts.md, "Signed provenance"): a per-sweep secret key
// kept outside the sweep directory, HMAC-SHA256 signatures over every attempt manifest, and a hash-chained,
// append-only attempt journal DIR/journal.jsonl whose entries are signed too.
//
// Threat model: whoever holds the key can forge anything; the key guards against hand edits of a sweep directory
// and against attempts copied from another sweep or another cell, not against a user who has the key.
//
// Key file: one line "wbaudit-sweep-key/1 <sweep uuid> <64 hex digits>", mode 0600. Looked up, in order, at
// $WBAUDIT_KEY_FILE (one file, for cluster jobs), $XDG_CONFIG_HOME/wbaudit/keys/<sweep uuid>, and
// $HOME/.config/wbaudit/keys/<sweep uuid>. The uuid comes from sweep.json, which whoever can write the sweep can
// edit: it must be a UUID (never a path), and the key file is opened without following links and must be a regular
// file of the exact size, owned by this user and neither readable nor writable by others.
//
// Journal head: beside the key (<key file>.heads/<SHA-256 of the sweep directory's canonical path>, where someone who
// can only write the sweep cannot reach it), the signed count of journal entries and the SHA-256 of the last,
// rewritten after every append. A journal (and with it every record the journal covers: deviations, registrations,
// outputs) shorter than its head was cut, or replaced by an older copy in place. The head belongs to the directory's
// location: a copy of the sweep elsewhere starts without one (and gets its own with its first append), so copies of a
// sweep can diverge; an older copy put back in place cannot.
//
// Journal: one JSON object per line, canonical JSON (runners/store/identity.hpp), fields seq (0, 1, ...), prev (SHA-256
// of the previous line's text, 64 zeros for the first), event ("sweep": the creation record with the SHA-256 of
// sweep.json; "extend": the sweep extended by cells, with the SHA-256 of its rewritten sweep.json, which it signs from
// then on; "begin": an attempt's uuid reserved before its directory exists; "finish": the SHA-256 of the
// attempt's signed final manifest), time, and hmac (over the entry without hmac). Appends take an exclusive flock
// on the journal, drop a torn last line (a writer killed mid-append: a line without its newline, which nobody can
// have relied on), and write each line with one write(2) on an O_APPEND descriptor.
#include <cstddef>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wbaudit::runners {

inline constexpr const char* kKeySchema = "wbaudit-sweep-key/1";
inline constexpr const char* kJournalSchema = "wbaudit.journal/1";

struct SweepKey {
  std::string sweep_uuid;
  std::string secret;  // 32 raw bytes
  std::filesystem::path path;
};

inline constexpr const char* kJournalHeadSchema = "wbaudit.journal-head/1";

// Whether text is a UUID as random_uuid() writes it: 8-4-4-4-12 lower-case hex digits.
bool is_uuid(std::string_view text);

// Where the key of a sweep is looked for (and created): $WBAUDIT_KEY_FILE when set, otherwise the config directory.
// Empty when neither WBAUDIT_KEY_FILE, XDG_CONFIG_HOME nor HOME is set. Throws StoreError when sweep_uuid is not a
// UUID (it would name a path of the caller's choosing).
std::filesystem::path sweep_key_path(const std::string& sweep_uuid);
// Creates a fresh random key for a new sweep at sweep_key_path (directories 0700, file 0600, never overwriting an
// existing file). Throws StoreError naming the path.
SweepKey create_sweep_key(const std::string& sweep_uuid);
// Loads the key of a sweep; nullopt with why_not set ("no key file at ...", "key file X belongs to sweep Y", "is a
// symbolic link", "is readable by others", ...).
std::optional<SweepKey> load_sweep_key(const std::string& sweep_uuid, std::string& why_not);

// The signed journal head (above) of the sweep directory sweep_dir.
struct JournalHead {
  std::size_t entries = 0;
  std::string last_sha256;  // SHA-256 of the text of entry #entries-1
};
std::filesystem::path journal_head_path(const SweepKey& key, const std::filesystem::path& sweep_dir);
// Rewrites the head atomically (directory 0700, file 0600). Throws StoreError naming the path.
void write_journal_head(const SweepKey& key, const std::filesystem::path& sweep_dir, const JournalHead& head);
// The head, nullopt when there is none (a sweep made before heads existed, a copy, or a key copied without its
// heads); a head that is not signed by the key, or unreadable, sets problem.
std::optional<JournalHead> read_journal_head(const SweepKey& key, const std::filesystem::path& sweep_dir,
                                             std::string& problem);

// Lower-case hex HMAC-SHA256 of `context` + "\n" + canonical_json(value without its "hmac" member).
std::string sign_json(const SweepKey& key, const std::string& context, const nlohmann::json& value);
// Whether value["hmac"] is sign_json(key, context, value).
bool signature_valid(const SweepKey& key, const std::string& context, const nlohmann::json& value);

// What a journal says, after checking its chain and signatures.
struct JournalIndex {
  std::size_t entries = 0;                // complete lines
  bool torn_tail = false;                 // a last line without its newline (a writer killed mid-append)
  std::vector<std::string> problems;      // edited, removed or forged entries; empty when intact
  std::optional<std::string> sweep_json;  // SHA-256 of sweep.json signed by the creation entry or the last extension
  // Signed entries by (cell id, attempt uuid): the begin entries' seq and the finish entries' manifest hashes.
  std::map<std::pair<std::string, std::string>, std::size_t> begun;
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> finished;
  // Records the journal signs the end of (runners/store/registry.hpp, runners/exec/sweep_run.hpp): registrations by
  // analysis hash (the SHA-256 of their registration.json), the deviation log's length and hash after its last
  // journaled append or repair, and the derived outputs (summary tables, report) by path relative to the sweep, as last
  // written.
  std::map<std::string, std::string> registrations;
  std::optional<std::pair<std::size_t, std::string>> deviations;  // (lines, SHA-256 of the log's bytes)
  std::map<std::string, std::string> outputs;
  // SHA-256 of every complete line read so far (checked against the journal head).
  std::vector<std::string> line_hashes;
  // Incremental reading state (journal_read_more).
  std::uintmax_t offset = 0;
  std::string last_hash;
};

// Reads the complete lines of DIR/journal.jsonl beyond index.offset into index (a fresh index reads everything).
void journal_read_more(const std::filesystem::path& journal, const SweepKey& key, JournalIndex& index);

// The journal's first line (the sweep's creation record), written by SweepStore::create with write_file_atomic.
std::string journal_genesis_line(const SweepKey& key, const std::string& sweep_json_sha256);

// Appends one signed entry (seq, prev, time and hmac are filled in), then the journal head, and returns its seq. Safe
// against concurrent appenders (flock, held over both) and against writers killed mid-append (the head then lags by
// one entry, which no check minds). Throws StoreError naming the journal.
std::size_t journal_append(const std::filesystem::path& journal, const SweepKey& key, nlohmann::json entry);

}  // namespace wbaudit::runners
