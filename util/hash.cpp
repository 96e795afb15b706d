#include "util/hash.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

namespace wbaudit::util {
namespace {

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

MdCtx sha256_context() {
  MdCtx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    throw HashError("sha256: OpenSSL EVP_DigestInit_ex failed");
  }
  return ctx;
}

std::string hex_digest(EVP_MD_CTX* ctx) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx, digest.data(), &length) != 1) {
    throw HashError("sha256: EVP_DigestFinal_ex failed");
  }
  return to_hex(digest.data(), length);
}

}  // namespace

std::string to_hex(const unsigned char* bytes, std::size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(kHex[bytes[i] >> 4]);
    out.push_back(kHex[bytes[i] & 0xf]);
  }
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  MdCtx ctx = sha256_context();
  if (EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size()) != 1) {
    throw HashError("sha256: EVP_DigestUpdate failed");
  }
  return hex_digest(ctx.get());
}

std::string sha256_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    throw HashError("sha256: cannot open " + path.string() + ": " + std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    throw HashError("sha256: " + path.string() + " is not a regular file");
  }
  MdCtx ctx = sha256_context();
  std::vector<char> buffer(1 << 20);
  while (true) {
    const ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got < 0) {
      throw HashError("sha256: read error on " + path.string() + ": " + std::strerror(errno));
    }
    if (got == 0) {
      break;
    }
    if (EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<std::size_t>(got)) != 1) {
      throw HashError("sha256: EVP_DigestUpdate failed on " + path.string());
    }
  }
  return hex_digest(ctx.get());
}

}  // namespace wbaudit::util
