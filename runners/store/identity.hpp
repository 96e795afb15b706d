#pragma once
// Canonical identity: the canonical JSON text of a cell configuration and SHA-256 digests (OpenSSL EVP).
//
// Canonical JSON (what the cell id hashes):
//  - no whitespace; object keys sorted bytewise (nlohmann::json stores objects in a std::map<std::string, ...>,
//    so dump() already emits keys in std::less<std::string> order at every depth);
//  - numbers by value: an integer prints as an integer; a floating-point number whose value is an integer with
//    |x| < 2^53 prints as that integer (so `lr = 1` and `lr = 1.0` give one id, and -0.0 prints as 0); any other
//    double prints as nlohmann's Grisu2 text (exact round trip, shortest digits in practice; e.g. 0.001 ->
//    "0.001", 1e-8 -> "1e-08"), so "1e-3" and "0.001" in a spec give the same text; NaN and infinities are errors.
//    The tests pin this text against hand-written strings, so a dependency upgrade that changed it would fail;
//  - strings as UTF-8 with JSON's mandatory escapes only (invalid UTF-8 is an error);
//  - the configuration must carry its schema version (key "schema", e.g. "wbaudit.cell/1"), which is therefore
//    part of the id.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "util/hash.hpp"

namespace wbaudit::runners {

inline constexpr const char* kCellSchema = "wbaudit.cell/1";

class IdentityError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Canonical text of any JSON value (rules above). Throws IdentityError naming the key path of a NaN/inf.
std::string canonical_json(const nlohmann::json& value);

// SHA-256 of bytes and of files (util/hash.hpp), as every record of the store hashes them.
using util::sha256_file;
using util::sha256_hex;

// Cell id: SHA-256 of canonical_json(config). Throws IdentityError when config is not an object or lacks a
// string "schema".
std::string cell_id(const nlohmann::json& config);

// A random RFC 4122 version-4 UUID (OpenSSL RAND_bytes), lower-case text.
std::string random_uuid();

// The running executable (/proc/self/exe resolved) and its SHA-256, computed once per process.
std::filesystem::path self_executable();
const std::string& self_executable_sha256();

// A shared library this process loaded from outside the system directories (/lib, /lib32, /lib64, /usr/lib,
// /usr/lib32, /usr/lib64 and below), e.g. Kokkos from ~/.cache/wbaudit/...: what a sweep freezes beside its
// executable copy, in bin/lib/ (the executable's RUNPATH starts with $ORIGIN/lib, so the copy finds them there).
struct LoadedLibrary {
  std::string name;  // file name as loaded (the soname the executable asks for, e.g. libkokkoscore.so.3.4)
  std::filesystem::path path;
  std::string sha256;
};
// Those libraries, sorted by name; listed and hashed once per process (dl_iterate_phdr).
const std::vector<LoadedLibrary>& non_system_libraries();
// Whether a path lies in one of those system directories.
bool is_system_library_path(const std::filesystem::path& path);

// Build and library identity of this binary, as recorded in every attempt manifest:
// {"version", "git_commit", "git_dirty", "kokkos_version", "mpi_version", "mpi_library"}.
nlohmann::json build_identity();

}  // namespace wbaudit::runners
