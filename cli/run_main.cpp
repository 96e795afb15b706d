// The wbaudit program: Kokkos' arguments split from ours, the subcommands that registered themselves, and the exit
// statuses of the README. main.cpp calls run_main; tests link the subcommands with their own registrations.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.hpp"

namespace wbaudit::cli {

namespace {

std::vector<RegisteredCommand>& command_list() {
  static std::vector<RegisteredCommand> commands;
  return commands;
}

}  // namespace

bool register_command(int order, CommandAdder add) {
  auto& list = command_list();
  list.push_back({order, add});
  std::stable_sort(list.begin(), list.end(),
                   [](const RegisteredCommand& a, const RegisteredCommand& b) { return a.order < b.order; });
  return true;
}

const std::vector<RegisteredCommand>& registered_commands() {
  return command_list();
}

namespace {

// A thread count: a decimal integer in [1, 4096].
int parse_threads(std::string_view option, std::string_view text) {
  int n = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || r.ec != std::errc() || r.ptr != text.data() + text.size() || n < 1 || n > 4096) {
    throw std::invalid_argument(std::string(option) + ": \"" + std::string(text) +
                                "\" is not a thread count (an integer in 1..4096)");
  }
  return n;
}

// Splits argv into Kokkos' arguments and ours. `--threads N` (or `--threads=N`) becomes `--kokkos-threads=N`;
// Kokkos' own options are validated here, because Kokkos aborts on a malformed value and silently ignores a
// misspelt option.
void split_arguments(int argc, char** argv, std::vector<std::string>& kokkos, std::vector<char*>& ours) {
  static const std::vector<std::string_view> kValued = {
      "--kokkos-threads",  "--kokkos-numa",          "--kokkos-device",    "--kokkos-device-id",
      "--kokkos-ndevices", "--kokkos-tools-library", "--kokkos-tools-args"};
  static const std::vector<std::string_view> kFlags = {"--kokkos-disable-warnings"};
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--threads" || a.rfind("--threads=", 0) == 0) {
      std::string_view value;
      if (a == "--threads") {
        if (i + 1 >= argc) {
          throw std::invalid_argument("--threads needs a value (e.g. --threads 2)");
        }
        value = argv[++i];
      } else {
        value = a.substr(10);
      }
      kokkos.push_back("--kokkos-threads=" + std::to_string(parse_threads("--threads", value)));
      continue;
    }
    if (a.rfind("--kokkos-", 0) != 0) {
      ours.push_back(argv[i]);
      continue;
    }
    const std::size_t eq = a.find('=');
    const std::string_view name = a.substr(0, eq);
    const bool valued = std::find(kValued.begin(), kValued.end(), name) != kValued.end();
    const bool flag = std::find(kFlags.begin(), kFlags.end(), name) != kFlags.end();
    if (!valued && !flag) {
      std::string known;
      for (auto k : kValued) {
        known += std::string(known.empty() ? "" : ", ") + std::string(k) + "=V";
      }
      for (auto k : kFlags) {
        known += ", " + std::string(k);
      }
      throw std::invalid_argument("unknown Kokkos option " + std::string(a) + " (known: " + known +
                                  "; or --threads N)");
    }
    if (valued && eq == std::string_view::npos) {
      throw std::invalid_argument(std::string(name) + " takes its value after '=' (e.g. " + std::string(name) +
                                  "=2); or use --threads N");
    }
    if (name == "--kokkos-threads") {
      parse_threads(name, a.substr(eq + 1));
    }
    kokkos.emplace_back(a);
  }
}

}  // namespace

int run_main(int argc, char** argv) {
  // Unpinned threads: ranks and other processes share the cores; this also silences Kokkos' binding warning.
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
  // Kokkos gets only its own --kokkos-* arguments (e.g. --kokkos-threads=2), so that --help is ours alone;
  // CLI11 sees the rest.
  std::vector<std::string> kokkos_strings;
  std::vector<char*> kokkos_args{argv[0]}, cli_args{argv[0]};
  try {
    split_arguments(argc, argv, kokkos_strings, cli_args);
  } catch (const std::exception& e) {
    std::cerr << "wbaudit: error: " << e.what() << "\n";
    return kExitUsage;
  }
  for (std::string& k : kokkos_strings) {
    kokkos_args.push_back(k.data());
  }
  int kokkos_argc = static_cast<int>(kokkos_args.size());
  Kokkos::ScopeGuard kokkos(kokkos_argc, kokkos_args.data());
  argc = static_cast<int>(cli_args.size());
  argv = cli_args.data();
  CLI::App app{"wbaudit: audit and forecast erased weight updates in low-precision training"};
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("--version", version, "Print the build identity (git commit, Kokkos backend, MPI library) and exit");
  // Every error line starts with "wbaudit: error: ", CLI11's too ("wbaudit: error: spec is required").
  app.failure_message([](const CLI::App* failed, const CLI::Error& e) {
    return "wbaudit: error: " + CLI::FailureMessage::simple(failed, e);
  });
  app.footer(
      "Threads: --threads N (any position; the same as Kokkos' --kokkos-threads=N, or OMP_NUM_THREADS).\n"
      "Results are bitwise identical for any thread, worker or rank count.");

  // Every subcommand registered itself (its cmd_*.cpp calls register_command): added in their order.
  for (const auto& command : registered_commands()) {
    command.add(app);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version-like successes exit 0; every malformed command line exits kExitUsage (CLI11's own
    // codes, 105..109, are not documented anywhere a user would look).
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  } catch (const ExitStatus& status) {
    return status.code;
  } catch (const nlohmann::json::exception& e) {
    // A JSON value of the wrong type or shape that no reader caught with its file name: say what it is in words.
    std::cerr << "wbaudit: error: malformed JSON input (a record or manifest of the directory given was edited or is "
                 "corrupt): "
              << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "wbaudit: error: out of memory (the input asks for more memory than this machine has)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "wbaudit: error: " << e.what() << "\n";
    return 1;
  }
  if (version) {
    print_version();
    return 0;
  }
  if (app.get_subcommands().empty()) {
    std::cout << app.help();
    return 0;
  }
  return 0;
}

}  // namespace wbaudit::cli
