// wbaudit: audit and forecast erased weight updates in low-precision training.
#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string_view>
#include <vector>

#include "runners/cli/commands.hpp"

int main(int argc, char** argv) {
  // Unpinned threads: ranks and other processes share the cores; this also silences Kokkos' binding warning.
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
  // Kokkos gets only its own --kokkos-* arguments (e.g. --kokkos-threads=2), so that --help is ours alone;
  // CLI11 sees the rest.
  std::vector<char*> kokkos_args{argv[0]}, cli_args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    (std::string_view(argv[i]).rfind("--kokkos-", 0) == 0 ? kokkos_args : cli_args).push_back(argv[i]);
  }
  int kokkos_argc = static_cast<int>(kokkos_args.size());
  Kokkos::ScopeGuard kokkos(kokkos_argc, kokkos_args.data());
  argc = static_cast<int>(cli_args.size());
  argv = cli_args.data();
  CLI::App app{"wbaudit: audit and forecast erased weight updates in low-precision training"};
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("--version", version, "Print the build identity (git commit, Kokkos backend, MPI library) and exit");

  // Subcommands are registered here, one call each (declared in commands.hpp).
  wbaudit::cli::add_run_command(app);
  wbaudit::cli::add_status_command(app);
  wbaudit::cli::add_submit_command(app);
  wbaudit::cli::add_register_command(app);
  wbaudit::cli::add_deviate_command(app);
  wbaudit::cli::add_run_cells_command(app);
  wbaudit::cli::add_formats_command(app);
  wbaudit::cli::add_round_command(app);
  wbaudit::cli::add_evaluate_command(app);
  wbaudit::cli::add_worker_command(app);
  wbaudit::cli::add_audit_command(app);
  wbaudit::cli::add_import_command(app);

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
