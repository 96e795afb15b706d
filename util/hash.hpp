#pragma once
// SHA-256 (OpenSSL EVP) and lower-case hex: what identities, signatures and data files are hashed with.
#include <cstddef>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace wbaudit::util {

class HashError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Lower-case hex of bytes.
std::string to_hex(const unsigned char* bytes, std::size_t n);

// Lower-case hex SHA-256 of bytes.
std::string sha256_hex(std::string_view bytes);

// Lower-case hex SHA-256 of a file's content, read in 1 MiB blocks. The file is opened without blocking and must be a
// regular file (a FIFO or device planted where a file belongs neither hangs nor floods the reader). Throws HashError
// naming the file and errno text.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace wbaudit::util
