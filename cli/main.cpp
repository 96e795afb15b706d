// wbaudit: audit and forecast erased weight updates in low-precision training.
#include "cli/commands.hpp"

int main(int argc, char** argv) {
  return wbaudit::cli::run_main(argc, argv);
}
