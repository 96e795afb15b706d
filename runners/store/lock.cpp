#include "runners/store/lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <string>

#include "runners/store/store.hpp"

namespace wbaudit::runners {

namespace {

std::string read_all(int fd) {
  std::string text;
  char buffer[512];
  if (::lseek(fd, 0, SEEK_SET) < 0) {
    return text;
  }
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) {
    text.append(buffer, static_cast<std::size_t>(n));
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) {
    text.pop_back();
  }
  return text;
}

}  // namespace

namespace {

// Opens (creating) a lock file inside the sweep without following a link, and refuses anything but a regular file:
// a link planted at DIR/.lock would otherwise make the owner truncate the file it points to.
int open_lock_file(const std::filesystem::path& file) {
  // O_CLOEXEC: worker processes (exec'd) do not inherit the lock's descriptor.
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw StoreError(file.string() + ": cannot open the sweep lock: " +
                     (err == ELOOP
                          ? std::string("it is a symbolic link (remove it; wbaudit never writes through links)")
                          : std::string(std::strerror(err))));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw StoreError(file.string() + ": the sweep lock is not a regular file (remove it)");
  }
  return fd;
}

}  // namespace

SweepLock SweepLock::acquire(const std::filesystem::path& dir) {
  const std::filesystem::path file = path_of(dir);
  const int fd = open_lock_file(file);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = read_all(fd);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      throw StoreError(dir.string() + " is being run by another wbaudit process (" +
                       (holder.empty() ? std::string("holder unknown") : holder) +
                       "); wait for it to finish or stop it, then run again with --resume");
    }
    throw StoreError(file.string() + ": cannot lock: " + std::strerror(err));
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char when[32] = {};
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const std::string text = "pid " + std::to_string(::getpid()) + " on " + host + " since " + when + "\n";
  if (::ftruncate(fd, 0) == 0) {
    (void)::pwrite(fd, text.data(), text.size(), 0);
  }
  return SweepLock(fd);
}

SweepLock SweepLock::acquire_records(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / ".records.lock";
  const int fd = open_lock_file(file);
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      const int err = errno;
      ::close(fd);
      throw StoreError(file.string() + ": cannot lock: " + std::strerror(err));
    }
  }
  return SweepLock(fd);
}

SweepLock::~SweepLock() {
  if (m_fd >= 0) {
    ::close(m_fd);  // releases the flock
  }
}

}  // namespace wbaudit::runners
