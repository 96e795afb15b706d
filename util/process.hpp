#pragma once
// Running another program: argv straight to posix_spawnp, never through a shell, so no word in it is ever
// interpreted (paths with spaces, quotes, $(...) or backticks reach the program as they are).
#include <filesystem>
#include <string>
#include <vector>

namespace wbaudit::util {

struct CommandResult {
  int exit_code = -1;  // 127: the program was not found; 128 + n: killed by signal n
  std::string output;  // stdout and stderr together
};

// Runs argv in working_directory (empty: this process'), waits for it, and captures its output.
CommandResult run_command(const std::vector<std::string>& argv, const std::filesystem::path& working_directory = {});

}  // namespace wbaudit::util
