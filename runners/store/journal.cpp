#include "runners/store/journal.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "runners/store/identity.hpp"
#include "runners/store/store.hpp"
#include "util/files.hpp"
#include "util/hash.hpp"

namespace wbaudit::runners {
namespace fs = std::filesystem;
using util::errno_text;
using util::to_hex;
namespace {

constexpr std::size_t kSecretBytes = 32;
// "wbaudit-sweep-key/1 <36-character uuid> <64 hex digits>\n"
constexpr std::size_t kKeyFileBytes = 19 + 1 + 36 + 1 + 2 * kSecretBytes + 1;
constexpr std::size_t kMaxHeadBytes = 4096;
const std::string kZeroHash(64, '0');

std::optional<std::string> from_hex(const std::string& text) {
  if (text.size() % 2 != 0) {
    return std::nullopt;
  }
  std::string out;
  for (std::size_t i = 0; i < text.size(); i += 2) {
    auto nibble = [](char c) -> int {
      if (c >= '0' && c <= '9') {
        return c - '0';
      }
      if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
      }
      return -1;
    };
    const int hi = nibble(text[i]), lo = nibble(text[i + 1]);
    if (hi < 0 || lo < 0) {
      return std::nullopt;
    }
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

std::string hmac_hex(const std::string& secret, const std::string& data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest.data(), &length) == nullptr) {
    throw IdentityError("HMAC-SHA256 failed (OpenSSL)");
  }
  return to_hex(digest.data(), length);
}

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// A value from an untrusted file, safe to print: at most 80 characters, control characters as '?'.
std::string printable(const std::string& text) {
  std::string out;
  for (const char c : text.substr(0, 80)) {
    out.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c);
  }
  return text.size() > 80 ? out + "..." : out;
}

// Reads a file that must be private to this user: opened without following a link and without blocking (a FIFO), a
// regular file owned by this user that no one else may read or write, of at most max_bytes (exactly max_bytes for
// the key). False with why set otherwise.
bool read_private_file(const fs::path& path, std::size_t max_bytes, std::string& text, std::string& why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      why = "the sweep's key is not at " + path.string() +
            " (copy it there from the machine that created the sweep, or point WBAUDIT_KEY_FILE at it)";
    } else if (errno == ELOOP) {
      why = path.string() + " is a symbolic link; a key is never read through a link";
    } else {
      why = "cannot open " + path.string() + ": " + errno_text();
    }
    return false;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    why = "cannot stat " + path.string() + ": " + errno_text();
    return false;
  }
  const bool exact = max_bytes == kKeyFileBytes;
  if (!S_ISREG(st.st_mode)) {
    why = path.string() + " is not a regular file";
  } else if (st.st_uid != ::geteuid()) {
    why = path.string() + " is owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
          std::to_string(::geteuid()) + ")";
  } else if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    why = path.string() + " has mode " + mode + ": others may read or write it; `chmod 600 " + path.string() +
          "` (and replace the key if anyone else could have read it)";
  } else if (exact ? static_cast<std::size_t>(st.st_size) != max_bytes
                   : static_cast<std::size_t>(st.st_size) > max_bytes) {
    why = path.string() + " has " + std::to_string(st.st_size) + " bytes, not the " + std::to_string(max_bytes) +
          (exact ? "" : " at most") + " of a wbaudit " + (exact ? "sweep key" : "journal head");
  }
  if (!why.empty()) {
    return false;
  }
  text.assign(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      why = "cannot read " + path.string() + (n < 0 ? ": " + errno_text() : ": it shrank while read");
      return false;
    }
    got += static_cast<std::size_t>(n);
  }
  return true;
}

void write_all(int fd, const std::string& bytes, const fs::path& path) {
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw StoreError("cannot append to " + path.string() + ": " + errno_text());
    }
    written += static_cast<std::size_t>(n);
  }
}

// The last complete line of an open journal and the offset just after it (0 and "" for an empty file).
std::pair<std::uintmax_t, std::string> last_complete_line(int fd, std::uintmax_t size, const fs::path& path) {
  std::size_t window = 4096;
  while (true) {
    const std::uintmax_t from = size > window ? size - window : 0;
    std::string buffer(static_cast<std::size_t>(size - from), '\0');
    if (::pread(fd, buffer.data(), buffer.size(), static_cast<off_t>(from)) != static_cast<ssize_t>(buffer.size())) {
      throw StoreError("cannot read " + path.string() + ": " + errno_text());
    }
    const auto end = buffer.rfind('\n');
    if (end == std::string::npos) {
      if (from == 0) {
        return {0, ""};
      }
      window *= 4;
      continue;
    }
    const auto begin = end == 0 ? std::string::npos : buffer.rfind('\n', end - 1);
    if (begin == std::string::npos && from > 0) {
      window *= 4;
      continue;
    }
    const std::size_t first = begin == std::string::npos ? 0 : begin + 1;
    return {from + end + 1, buffer.substr(first, end - first)};
  }
}

}  // namespace

bool is_uuid(std::string_view text) {
  if (text.size() != 36) {
    return false;
  }
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

fs::path sweep_key_path(const std::string& sweep_uuid) {
  if (!is_uuid(sweep_uuid)) {
    throw StoreError("the sweep uuid \"" + printable(sweep_uuid) + "\" is not a UUID (sweep.json was edited)");
  }
  if (const auto file = env("WBAUDIT_KEY_FILE"); !file.empty()) {
    return file;
  }
  if (const auto config = env("XDG_CONFIG_HOME"); !config.empty()) {
    return fs::path(config) / "wbaudit" / "keys" / sweep_uuid;
  }
  if (const auto home = env("HOME"); !home.empty()) {
    return fs::path(home) / ".config" / "wbaudit" / "keys" / sweep_uuid;
  }
  return {};
}

SweepKey create_sweep_key(const std::string& sweep_uuid) {
  SweepKey key;
  key.sweep_uuid = sweep_uuid;
  key.path = sweep_key_path(sweep_uuid);
  if (key.path.empty()) {
    throw StoreError("cannot create the sweep's signing key: none of WBAUDIT_KEY_FILE, XDG_CONFIG_HOME, HOME is set");
  }
  std::array<unsigned char, kSecretBytes> secret{};
  if (RAND_bytes(secret.data(), static_cast<int>(secret.size())) != 1) {
    throw StoreError("cannot create the sweep's signing key: RAND_bytes failed");
  }
  key.secret.assign(reinterpret_cast<const char*>(secret.data()), secret.size());
  if (!key.path.parent_path().empty()) {
    std::error_code ec;
    fs::create_directories(key.path.parent_path(), ec);
    if (ec) {
      throw StoreError("cannot create the key directory " + key.path.parent_path().string() + ": " + ec.message());
    }
    if (key.path.parent_path().filename() == "keys") {
      fs::permissions(key.path.parent_path(), fs::perms::owner_all, ec);  // the keys directory is private
    }
  }
  const int fd = ::open(key.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const std::string why = errno == EEXIST ? std::string(
                                                  "it already exists (the key of another sweep; for a new "
                                                  "sweep name a new file in WBAUDIT_KEY_FILE, or unset it)")
                                            : errno_text();
    throw StoreError("cannot create the sweep's signing key " + key.path.string() + ": " + why);
  }
  try {
    write_all(fd, std::string(kKeySchema) + " " + sweep_uuid + " " + to_hex(secret.data(), secret.size()) + "\n",
              key.path);
    if (::fsync(fd) != 0) {
      throw StoreError("cannot fsync " + key.path.string() + ": " + errno_text());
    }
  } catch (...) {
    ::close(fd);
    ::unlink(key.path.c_str());
    throw;
  }
  ::close(fd);
  OPENSSL_cleanse(secret.data(), secret.size());
  return key;
}

std::optional<SweepKey> load_sweep_key(const std::string& sweep_uuid, std::string& why_not) {
  if (!is_uuid(sweep_uuid)) {
    why_not = "the sweep uuid \"" + printable(sweep_uuid) + "\" in sweep.json is not a UUID (sweep.json was edited)";
    return std::nullopt;
  }
  const fs::path path = sweep_key_path(sweep_uuid);
  if (path.empty()) {
    why_not = "no key location (none of WBAUDIT_KEY_FILE, XDG_CONFIG_HOME, HOME is set)";
    return std::nullopt;
  }
  std::string text;
  if (!read_private_file(path, kKeyFileBytes, text, why_not)) {
    return std::nullopt;
  }
  std::istringstream in(text);
  std::string schema, uuid, hex;
  in >> schema >> uuid >> hex;
  const auto secret = from_hex(hex);
  if (schema != kKeySchema || !secret || secret->size() != kSecretBytes) {
    why_not = "the key file " + path.string() + " is not a wbaudit sweep key";
    return std::nullopt;
  }
  if (uuid != sweep_uuid) {
    why_not =
        "the key file " + path.string() + " belongs to sweep " + printable(uuid) + ", not to this sweep " + sweep_uuid;
    return std::nullopt;
  }
  return SweepKey{sweep_uuid, *secret, path};
}

fs::path journal_head_path(const SweepKey& key, const fs::path& sweep_dir) {
  std::error_code ec;
  fs::path where = fs::weakly_canonical(fs::absolute(sweep_dir), ec);
  if (ec) {
    where = fs::absolute(sweep_dir).lexically_normal();
  }
  return fs::path(key.path.string() + ".heads") / sha256_hex(where.string());
}

void write_journal_head(const SweepKey& key, const fs::path& sweep_dir, const JournalHead& head) {
  nlohmann::json value = {{"schema", kJournalHeadSchema},
                          {"sweep_uuid", key.sweep_uuid},
                          {"entries", head.entries},
                          {"last_sha256", head.last_sha256}};
  value["hmac"] = sign_json(key, kJournalHeadSchema, value);
  const fs::path path = journal_head_path(key, sweep_dir);
  if (::mkdir(path.parent_path().c_str(), 0700) != 0 && errno != EEXIST) {
    throw StoreError("cannot create the journal heads' directory " + path.parent_path().string() + ": " + errno_text());
  }
  const fs::path temp = path.string() + ".tmp." + std::to_string(::getpid());
  ::unlink(temp.c_str());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw StoreError("cannot write the journal head " + temp.string() + ": " + errno_text());
  }
  try {
    write_all(fd, canonical_json(value) + "\n", temp);
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(temp.c_str());
    throw StoreError("cannot write the journal head " + path.string() + ": " + why);
  }
}

std::optional<JournalHead> read_journal_head(const SweepKey& key, const fs::path& sweep_dir, std::string& problem) {
  const fs::path path = journal_head_path(key, sweep_dir);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) {
    return std::nullopt;
  }
  std::string text, why;
  if (!read_private_file(path, kMaxHeadBytes, text, why)) {
    problem = "the journal head: " + why;
    return std::nullopt;
  }
  try {
    const auto value = nlohmann::json::parse(text);
    if (!signature_valid(key, kJournalHeadSchema, value) || value.value("sweep_uuid", "") != key.sweep_uuid) {
      problem = "the journal head " + path.string() + " is not signed by this sweep's key";
      return std::nullopt;
    }
    return JournalHead{value.at("entries").get<std::size_t>(), value.at("last_sha256").get<std::string>()};
  } catch (const nlohmann::json::exception& e) {
    problem = "the journal head " + path.string() + " is corrupt (" + e.what() + ")";
    return std::nullopt;
  }
}

std::string sign_json(const SweepKey& key, const std::string& context, const nlohmann::json& value) {
  nlohmann::json body = value;
  body.erase("hmac");
  return hmac_hex(key.secret, context + "\n" + canonical_json(body));
}

bool signature_valid(const SweepKey& key, const std::string& context, const nlohmann::json& value) {
  if (!value.is_object() || !value.contains("hmac") || !value["hmac"].is_string()) {
    return false;
  }
  const std::string given = value["hmac"].get<std::string>();
  const std::string expected = sign_json(key, context, value);
  return given.size() == expected.size() && CRYPTO_memcmp(given.data(), expected.data(), given.size()) == 0;
}

void journal_read_more(const fs::path& journal, const SweepKey& key, JournalIndex& index) {
  std::ifstream in(journal, std::ios::binary);
  if (!in) {
    if (index.entries == 0 && index.problems.empty()) {
      index.problems.push_back(journal.string() + " is missing");
    }
    return;
  }
  if (index.offset == 0) {
    index.last_hash = kZeroHash;
  }
  in.seekg(static_cast<std::streamoff>(index.offset));
  std::string line;
  constexpr std::size_t kMaxProblems = 20;
  auto problem = [&](const std::string& text) {
    if (index.problems.size() < kMaxProblems) {
      index.problems.push_back(text);
    }
  };
  index.torn_tail = false;
  while (std::getline(in, line)) {
    if (in.eof()) {  // no newline: a torn append (or a hand-cut line), ignored until the next append removes it
      index.torn_tail = true;
      break;
    }
    const std::size_t seq = index.entries++;
    index.offset += line.size() + 1;
    const std::string where = "journal entry #" + std::to_string(seq) + " (line " + std::to_string(seq + 1) + ")";
    const std::string hash = sha256_hex(line);
    const std::string prev = index.last_hash;
    index.last_hash = hash;
    index.line_hashes.push_back(hash);
    nlohmann::json entry;
    try {
      entry = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      problem(where + " is not JSON (edited or corrupt)");
      continue;
    }
    const auto text = [&entry](const char* name) {
      const auto it = entry.find(name);
      return it != entry.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    if (!signature_valid(key, kJournalSchema, entry)) {
      problem(where + " is not signed by this sweep's key (edited or forged)");
      continue;
    }
    if (!entry.contains("seq") || !entry["seq"].is_number_unsigned() || entry["seq"].get<std::size_t>() != seq) {
      problem(where + " says it is entry #" + (entry.contains("seq") ? entry["seq"].dump() : std::string("(none)")) +
              " (entries were removed, inserted or reordered)");
    }
    if (text("prev") != prev) {
      problem(where + " does not follow the entry before it (an entry was removed or edited)");
    }
    const std::string event = text("event");
    if (event == "sweep") {
      if (seq != 0) {
        problem(where + ": a second creation record");
      }
      index.sweep_json = text("sweep_sha256");
    } else if (event == "extend") {  // the sweep extended by cells: sweep.json rewritten (runners/store/extend.hpp)
      if (seq == 0) {
        problem(where + ": an extension before the sweep's creation record");
      }
      index.sweep_json = text("sweep_sha256");
    } else if (event == "begin" || event == "finish") {
      const auto id = std::make_pair(text("cell"), text("attempt"));
      if (event == "begin") {
        index.begun.emplace(id, seq);
      } else {
        index.finished[id].push_back(text("manifest_sha256"));
      }
    } else if (event == "register") {
      index.registrations[text("analysis_sha256")] = text("registration_sha256");
    } else if (event == "deviation" || event == "deviation-repair") {
      const auto lines = entry.find("lines");
      if (lines == entry.end() || !lines->is_number_unsigned()) {
        problem(where + ": a deviation entry without its log's length");
      } else {
        index.deviations = std::make_pair(lines->get<std::size_t>(), text("log_sha256"));
      }
    } else if (event == "outputs") {
      const auto files = entry.find("files");
      index.outputs.clear();
      if (files != entry.end() && files->is_object()) {
        for (const auto& [name, digest] : files->items()) {
          if (digest.is_string()) {
            index.outputs[name] = digest.get<std::string>();
          }
        }
      }
    } else {
      problem(where + ": unknown event \"" + event + "\"");
    }
  }
  if (index.entries > 0 && !index.sweep_json && index.problems.empty()) {
    problem("journal entry #0 is not the sweep's creation record");
  }
}

std::string journal_genesis_line(const SweepKey& key, const std::string& sweep_json_sha256) {
  nlohmann::json entry = {{"seq", 0},
                          {"prev", kZeroHash},
                          {"event", "sweep"},
                          {"sweep_uuid", key.sweep_uuid},
                          {"sweep_sha256", sweep_json_sha256},
                          {"time", utc_now()}};
  entry["hmac"] = sign_json(key, kJournalSchema, entry);
  return canonical_json(entry) + "\n";
}

std::size_t journal_append(const fs::path& journal, const SweepKey& key, nlohmann::json entry) {
  const int fd = ::open(journal.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  if (fd < 0) {
    throw StoreError("cannot open the journal " + journal.string() + ": " + errno_text());
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }  // also releases the flock
  } closer{fd};
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      throw StoreError("cannot lock the journal " + journal.string() + ": " + errno_text());
    }
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw StoreError("cannot stat " + journal.string() + ": " + errno_text());
  }
  const auto size = static_cast<std::uintmax_t>(st.st_size);
  const auto [end, last] = last_complete_line(fd, size, journal);
  if (end != size && ::ftruncate(fd, static_cast<off_t>(end)) != 0) {  // drop a torn last line
    throw StoreError("cannot remove the torn last line of " + journal.string() + ": " + errno_text());
  }
  std::size_t seq = 0;
  if (!last.empty()) {
    try {
      seq = nlohmann::json::parse(last).at("seq").get<std::size_t>() + 1;
    } catch (const nlohmann::json::exception& e) {
      throw StoreError("the last entry of the journal " + journal.string() + " is corrupt (" + e.what() +
                       "); the sweep's record was edited");
    }
  }
  entry["seq"] = seq;
  entry["prev"] = last.empty() ? kZeroHash : sha256_hex(last);
  entry["time"] = utc_now();
  entry.erase("hmac");
  entry["hmac"] = sign_json(key, kJournalSchema, entry);
  const std::string line = canonical_json(entry) + "\n";
  // Fault injection for the tests (docs/contracts.md): die by SIGKILL half-way through writing entry #N.
  if (const auto torn = env("WBAUDIT_FAULT_TORN_JOURNAL_ENTRY"); !torn.empty() && torn == std::to_string(seq)) {
    write_all(fd, line.substr(0, line.size() / 2), journal);
    std::raise(SIGKILL);
  }
  write_all(fd, line, journal);
  write_journal_head(key, journal.parent_path(), JournalHead{seq + 1, sha256_hex(line.substr(0, line.size() - 1))});
  return seq;
}

}  // namespace wbaudit::runners
