// One writer per sweep: a second process cannot take a held sweep lock and is told who holds it; the lock is free
// again once its holder ends, even by SIGKILL. Synchronised through pipes, never by sleeping.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "runners/store/lock.hpp"
#include "runners/store/store.hpp"

namespace {

using wbaudit::runners::StoreError;
using wbaudit::runners::SweepLock;
namespace fs = std::filesystem;

fs::path scratch() {
  const fs::path dir = fs::temp_directory_path() / ("wbaudit_lock_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// In a child process: 0 when the lock could be taken, 1 when it was refused naming `holder_pid`, 2 otherwise.
int try_in_child(const fs::path& dir, pid_t holder_pid) {
  const pid_t child = ::fork();
  if (child == 0) {
    int code = 2;
    try {
      SweepLock lock = SweepLock::acquire(dir);
      code = 0;
    } catch (const StoreError& e) {
      const std::string what = e.what();
      code = what.find("pid " + std::to_string(holder_pid)) != std::string::npos ? 1 : 2;
    } catch (...) {
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(SweepLock, SecondHolderIsRefusedNamingTheFirstAndGetsItAfterRelease) {
  const fs::path dir = scratch();
  {
    SweepLock lock = SweepLock::acquire(dir);
    EXPECT_EQ(try_in_child(dir, ::getpid()), 1);
  }
  EXPECT_EQ(try_in_child(dir, ::getpid()), 0);
  fs::remove_all(dir);
}

TEST(SweepLock, AKilledHolderLeavesNoStaleLock) {
  const fs::path dir = scratch();
  int ready[2], hold[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(hold), 0);
  const pid_t holder = ::fork();
  if (holder == 0) {
    SweepLock lock = SweepLock::acquire(dir);
    char c = 'x';
    (void)::write(ready[1], &c, 1);
    (void)::read(hold[0], &c, 1);  // blocks until killed
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  EXPECT_EQ(try_in_child(dir, holder), 1);
  ::kill(holder, SIGKILL);
  int status = 0;
  ::waitpid(holder, &status, 0);
  EXPECT_EQ(try_in_child(dir, holder), 0);
  for (int fd : {ready[0], ready[1], hold[0], hold[1]}) ::close(fd);
  fs::remove_all(dir);
}

}  // namespace
