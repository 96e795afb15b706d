#pragma once
// Files, the one way wbaudit reads and writes them: whole regular files in, atomic writes out (a temporary in the
// same directory, then rename), staged directories renamed into place when complete, and the texts errors name.
#include <filesystem>
#include <stdexcept>
#include <string>

namespace wbaudit::util {

class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// strerror(errno), for messages that name a file and why.
std::string errno_text();
// This host's name (gethostname), "unknown" when it cannot be read.
std::string host_name();

// The bytes of a regular file, opened without blocking: a FIFO or device where a file belongs is refused (FileError
// naming the path), never waited on or read without end.
std::string read_text(const std::filesystem::path& path);

// Writes bytes to path atomically: a temporary ".<name>.tmp.<pid>" in the same directory (created with O_EXCL |
// O_NOFOLLOW after removing a leftover of that name, so a planted link is never followed), then rename, so a reader
// sees the old content or the new, never a part. durable: also fsync the file before and the directory after the
// rename (survives power loss). Throws FileError naming the path and errno text (e.g. a full disk) and removes the
// temporary.
void write_atomic(const std::filesystem::path& path, const std::string& bytes, bool durable = true);

// fsync a file or a directory; throws FileError naming it.
void fsync_path(const std::filesystem::path& path, bool directory);

// A directory written in full before it appears: files go into ".<name>.tmp.<pid>" beside the final path, and
// commit() renames it into place; destroyed without commit (an exception), the staging directory is removed. The
// final path must not exist (an output is never overwritten): the constructor throws FileError naming it.
class StagedDirectory {
 public:
  explicit StagedDirectory(std::filesystem::path final_path);
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;
  ~StagedDirectory();
  // Where to write now.
  const std::filesystem::path& path() const { return m_staging; }
  const std::filesystem::path& final_path() const { return m_final; }
  // Renames the staging directory to the final path; throws FileError when it cannot.
  void commit();

 private:
  std::filesystem::path m_final;
  std::filesystem::path m_staging;
  bool m_committed = false;
};

}  // namespace wbaudit::util
