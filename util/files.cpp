#include "util/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace wbaudit::util {
namespace fs = std::filesystem;

std::string errno_text() {
  return std::strerror(errno);
}

std::string host_name() {
  char buffer[256] = {};
  if (::gethostname(buffer, sizeof buffer - 1) != 0) {
    return "unknown";
  }
  return buffer;
}

std::string read_text(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    throw FileError("cannot read " + path.string() + ": " + errno_text());
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw FileError("cannot stat " + path.string() + ": " + errno_text());
  }
  if (!S_ISREG(st.st_mode)) {
    throw FileError("cannot read " + path.string() + ": not a regular file");
  }
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));
  char buffer[65536];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      throw FileError("cannot read " + path.string() + ": " + errno_text());
    }
    if (n == 0) {
      break;
    }
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

void fsync_path(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) {
    throw FileError("cannot open " + path.string() + " to sync it: " + errno_text());
  }
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0) {
    throw FileError("fsync " + path.string() + ": " + std::strerror(saved));
  }
}

void write_atomic(const fs::path& path, const std::string& bytes, bool durable) {
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const fs::path temp = dir / ("." + path.filename().string() + ".tmp." + std::to_string(::getpid()));
  // A temporary of the same name is a leftover of a killed process with this pid (or a planted link): removed, never
  // followed; O_EXCL | O_NOFOLLOW create a fresh file or fail.
  ::unlink(temp.c_str());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw FileError("cannot create " + temp.string() + ": " + errno_text());
  }
  auto fail = [&](const std::string& what) {
    const std::string message = what + " " + temp.string() + ": " + errno_text();
    ::close(fd);
    ::unlink(temp.c_str());
    throw FileError(message);
  };
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      fail("cannot write");
    }
    written += static_cast<std::size_t>(n);
  }
  if (durable && ::fsync(fd) != 0) {
    fail("cannot fsync");
  }
  if (::close(fd) != 0) {
    const std::string message = "cannot close " + temp.string() + ": " + errno_text();
    ::unlink(temp.c_str());
    throw FileError(message);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string message = "cannot rename " + temp.string() + " to " + path.string() + ": " + errno_text();
    ::unlink(temp.c_str());
    throw FileError(message);
  }
  if (durable) {
    fsync_path(dir, true);
  }
}

StagedDirectory::StagedDirectory(fs::path final_path) : m_final(std::move(final_path)) {
  if (fs::exists(fs::symlink_status(m_final))) {
    throw FileError(m_final.string() + " already exists (an output is never overwritten; choose a new name)");
  }
  const fs::path parent = m_final.parent_path().empty() ? fs::path(".") : m_final.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) {
    throw FileError("cannot create " + parent.string() + ": " + ec.message());
  }
  m_staging = parent / ("." + m_final.filename().string() + ".tmp." + std::to_string(::getpid()));
  fs::remove_all(m_staging, ec);
  fs::create_directories(m_staging, ec);
  if (ec) {
    throw FileError("cannot create " + m_staging.string() + ": " + ec.message());
  }
}

StagedDirectory::~StagedDirectory() {
  if (!m_committed) {
    std::error_code ignored;
    fs::remove_all(m_staging, ignored);
  }
}

void StagedDirectory::commit() {
  if (fs::exists(fs::symlink_status(m_final))) {
    throw FileError(m_final.string() + " appeared while it was written (an output is never overwritten)");
  }
  std::error_code ec;
  fs::rename(m_staging, m_final, ec);
  if (ec) {
    throw FileError("cannot move " + m_staging.string() + " to " + m_final.string() + ": " + ec.message());
  }
  m_committed = true;
}

}  // namespace wbaudit::util
