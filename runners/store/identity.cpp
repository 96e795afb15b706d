#include "runners/store/identity.hpp"

#define OMPI_SKIP_MPICXX 1
#include <fcntl.h>
#include <link.h>
#include <mpi.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <wbaudit/build_info.hpp>

namespace wbaudit::runners {
namespace {

// 2^53: every integer of smaller magnitude is exactly representable, so printing it as an integer is exact.
constexpr double kExactIntegerLimit = 9007199254740992.0;

nlohmann::json normalized(const nlohmann::json& value, const std::string& path) {
  switch (value.type()) {
    case nlohmann::json::value_t::object: {
      nlohmann::json out = nlohmann::json::object();
      for (const auto& [key, item] : value.items()) {
        std::string child = path;
        if (!child.empty()) {
          child += '.';
        }
        child += key;
        out[key] = normalized(item, child);
      }
      return out;
    }
    case nlohmann::json::value_t::array: {
      nlohmann::json out = nlohmann::json::array();
      std::size_t i = 0;
      for (const auto& item : value) {
        out.push_back(normalized(item, path + "[" + std::to_string(i++) + "]"));
      }
      return out;
    }
    case nlohmann::json::value_t::number_float: {
      const double x = value.get<double>();
      if (!std::isfinite(x)) {
        throw IdentityError("canonical_json: " + (path.empty() ? std::string("value") : path) +
                            ": NaN or infinity has no canonical JSON form");
      }
      if (x == std::floor(x) && std::fabs(x) < kExactIntegerLimit) {
        return nlohmann::json(static_cast<std::int64_t>(x));
      }
      return value;
    }
    default:
      return value;
  }
}

}  // namespace

std::string canonical_json(const nlohmann::json& value) {
  try {
    return normalized(value, "").dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::strict);
  } catch (const nlohmann::json::type_error& e) {
    throw IdentityError(std::string("canonical_json: ") + e.what());
  }
}

std::string cell_id(const nlohmann::json& config) {
  if (!config.is_object()) {
    throw IdentityError("cell_id: the cell configuration must be a JSON object");
  }
  const auto schema = config.find("schema");
  if (schema == config.end() || !schema->is_string()) {
    throw IdentityError("cell_id: the cell configuration lacks its schema version (string key \"schema\")");
  }
  return sha256_hex(canonical_json(config));
}

std::string random_uuid() {
  std::array<unsigned char, 16> b{};
  if (RAND_bytes(b.data(), static_cast<int>(b.size())) != 1) {
    throw IdentityError("random_uuid: RAND_bytes failed");
  }
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);  // version 4
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);  // RFC 4122 variant
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) {
      out.push_back('-');
    }
    out.push_back(kHex[b[i] >> 4]);
    out.push_back(kHex[b[i] & 0xf]);
  }
  return out;
}

std::filesystem::path self_executable() {
  std::error_code ec;
  auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    throw IdentityError("self_executable: cannot resolve /proc/self/exe: " + ec.message());
  }
  return path;
}

const std::string& self_executable_sha256() {
  // Hash the open inode, not the path: a rebuild replacing the file must not change this process' identity.
  static const std::string digest = sha256_file("/proc/self/exe");
  return digest;
}

bool is_system_library_path(const std::filesystem::path& path) {
  const std::string text = path.lexically_normal().string();
  for (const char* dir : {"/lib/", "/lib32/", "/lib64/", "/usr/lib/", "/usr/lib32/", "/usr/lib64/"}) {
    if (text.rfind(dir, 0) == 0) {
      return true;
    }
  }
  return false;
}

const std::vector<LoadedLibrary>& non_system_libraries() {
  static const std::vector<LoadedLibrary> libraries = [] {
    std::vector<std::filesystem::path> paths;
    ::dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) {
          // The executable itself has an empty name, the vDSO a name without a directory.
          if (info->dlpi_name != nullptr && info->dlpi_name[0] == '/') {
            static_cast<std::vector<std::filesystem::path>*>(data)->emplace_back(info->dlpi_name);
          }
          return 0;
        },
        &paths);
    std::vector<LoadedLibrary> out;
    for (const auto& path : paths) {
      std::error_code ec;
      const auto resolved = std::filesystem::canonical(path, ec);
      if (is_system_library_path(path) || (!ec && is_system_library_path(resolved))) {
        continue;
      }
      const std::string name = path.filename().string();
      if (std::any_of(out.begin(), out.end(), [&](const LoadedLibrary& l) { return l.name == name; })) {
        continue;
      }
      out.push_back({name, path, sha256_file(path)});
    }
    std::sort(out.begin(), out.end(), [](const LoadedLibrary& a, const LoadedLibrary& b) { return a.name < b.name; });
    return out;
  }();
  return libraries;
}

nlohmann::json build_identity() {
  char library[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(library, &length);  // allowed before MPI_Init
  std::string mpi_library(library, static_cast<std::size_t>(std::max(length, 0)));
  if (auto cut = mpi_library.find_first_of(",\n"); cut != std::string::npos) {
    mpi_library.resize(cut);
  }
  return {{"version", build_info::kVersion},
          {"git_commit", build_info::kGitCommit},
          {"git_dirty", build_info::kGitDirty},
          {"kokkos_version", std::to_string(KOKKOS_VERSION / 10000) + "." + std::to_string(KOKKOS_VERSION / 100 % 100) +
                                 "." + std::to_string(KOKKOS_VERSION % 100)},
          {"mpi_version", std::to_string(MPI_VERSION) + "." + std::to_string(MPI_SUBVERSION)},
          {"mpi_library", mpi_library}};
}

}  // namespace wbaudit::runners
