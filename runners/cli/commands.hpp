#pragma once
// Each subcommand of the wbaudit executable lives in its own file and registers itself on the app here.
#include <CLI/CLI.hpp>

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

// Subcommand registration (one file each under runners/cli/). Each adds a subcommand whose callback does the work
// and throws on error (std::exception: message printed, exit 1) or ExitStatus.
namespace wbaudit::cli {
void add_run_command(CLI::App& app);
void add_status_command(CLI::App& app);
void add_submit_command(CLI::App& app);
void add_register_command(CLI::App& app);
void add_deviate_command(CLI::App& app);
void add_run_cells_command(CLI::App& app);
void add_formats_command(CLI::App& app);
void add_round_command(CLI::App& app);
void add_evaluate_command(CLI::App& app);
void add_worker_command(CLI::App& app);
void add_audit_command(CLI::App& app);
void add_import_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_grid_command(CLI::App& app);
}  // namespace wbaudit::cli
