#pragma once
// Each subcommand of the wbaudit executable lives in its own file and registers itself on the app here.
#include <CLI/CLI.hpp>
#include <vector>

namespace wbaudit::cli {

// Exit statuses (README "Exit codes"): 0 success; 1 an error (bad input or I/O, message on stderr); 2 a check found
// a problem (audit: inconsistent write-backs; status --check: a cell not canonical and complete); 3 a cell failed
// (run, run-cells) or a gate fails (evaluate --check); 4 a gate is inconclusive or none is declared (evaluate
// --check); kExitUsage a malformed command line.
inline constexpr int kExitUsage = 64;  // EX_USAGE of sysexits.h

// Thrown by a subcommand to end the program with a given exit status without an error message
// (e.g. an audit that found inconsistent coordinates exits 2).
struct ExitStatus {
  int code;
};

// Prints the build identity: version, git commit and dirty flag, Kokkos backend and threads, MPI library.
void print_version();

}  // namespace wbaudit::cli

// Subcommands register themselves: each cmd_*.cpp defines `void add_<name>_command(CLI::App&)`, which adds the
// subcommand and its callback (the callback does the work and throws on error: std::exception, message printed, exit
// 1; or ExitStatus), and registers it at static initialization with
//   namespace { [[maybe_unused]] const bool registered = register_command(kOrder, add_<name>_command); }
// `order` places it in `wbaudit --help` (lower first). Adding a subcommand means adding one file to cli/CMakeLists.txt.
namespace wbaudit::cli {
using CommandAdder = void (*)(CLI::App&);
struct RegisteredCommand {
  int order;
  CommandAdder add;
};
bool register_command(int order, CommandAdder add);
const std::vector<RegisteredCommand>& registered_commands();

// The whole program (what main() runs): parses argv, initializes Kokkos, runs the chosen subcommand and returns the
// exit status.
int run_main(int argc, char** argv);
}  // namespace wbaudit::cli
