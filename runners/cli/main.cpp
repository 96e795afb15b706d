// wbaudit: audit and forecast erased weight updates in low-precision training.
#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <exception>
#include <iostream>

#include "runners/cli/commands.hpp"

int main(int argc, char** argv) {
  // Kokkos consumes its own --kokkos-* arguments (e.g. --kokkos-threads=2) before CLI11 sees the rest.
  // Unpinned threads: ranks and other processes share the cores; this also silences Kokkos' binding warning.
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
  Kokkos::ScopeGuard kokkos(argc, argv);
  CLI::App app{"wbaudit: audit and forecast erased weight updates in low-precision training"};
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("--version", version, "Print the build identity (git commit, Kokkos backend, MPI library) and exit");

  // Subcommands are registered here, one call each (declared in commands.hpp).
  wbaudit::cli::add_status_command(app);
  wbaudit::cli::add_register_command(app);
  wbaudit::cli::add_deviate_command(app);
  wbaudit::cli::add_formats_command(app);
  wbaudit::cli::add_round_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const wbaudit::cli::ExitStatus& status) {
    return status.code;
  } catch (const std::exception& e) {
    std::cerr << "wbaudit: error: " << e.what() << "\n";
    return 1;
  }
  if (version) {
    wbaudit::cli::print_version();
    return 0;
  }
  if (app.get_subcommands().empty()) {
    std::cout << app.help();
    return 0;
  }
  return 0;
}
