#pragma once
// One writer per sweep: `wbaudit run` holds an advisory lock (flock) on DIR/.lock while it runs cells, so a second
// run on the same directory refuses at once and names the holder. The kernel releases the lock when the holder's
// process ends, however it ends (a killed run never leaves a stale lock behind); the pid and host written into the
// file are only for the message. Lock files are opened without following links and must be regular files.
#include <filesystem>
#include <string>

namespace wbaudit::runners {

class SweepLock {
 public:
  // Takes the lock of sweep directory `dir` (which must exist); throws StoreError naming the holder when another
  // process holds it.
  static SweepLock acquire(const std::filesystem::path& dir);
  // The lock of the sweep's records (the deviation log, the registry): DIR/.records.lock, waited for (a second
  // `deviate` or `register` runs after the first, never beside it). Independent of the run lock, so deviations and
  // registrations can be recorded while a run holds it.
  static SweepLock acquire_records(const std::filesystem::path& dir);

  SweepLock(SweepLock&& other) noexcept : m_fd(other.m_fd) { other.m_fd = -1; }
  SweepLock& operator=(SweepLock&&) = delete;
  SweepLock(const SweepLock&) = delete;
  SweepLock& operator=(const SweepLock&) = delete;
  ~SweepLock();

  static std::filesystem::path path_of(const std::filesystem::path& dir) { return dir / ".lock"; }

 private:
  explicit SweepLock(int fd) : m_fd(fd) {}
  int m_fd = -1;
};

}  // namespace wbaudit::runners
