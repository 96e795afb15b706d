#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <iostream>
#include <string>
#include <wbaudit/build_info.hpp>

#include "cli/commands.hpp"

namespace wbaudit::cli {

void print_version() {
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(mpi_version, &length);  // allowed before MPI_Init
  std::string mpi(mpi_version, static_cast<std::size_t>(length));
  if (auto cut = mpi.find_first_of(",\n"); cut != std::string::npos) {
    mpi.resize(cut);
  }
  std::cout << "wbaudit " << build_info::kVersion << "\n"
            << "commit  " << build_info::kGitCommit << (build_info::kGitDirty ? " (dirty)" : "") << "\n"
            << "kokkos  " << KOKKOS_VERSION / 10000 << '.' << KOKKOS_VERSION / 100 % 100 << '.' << KOKKOS_VERSION % 100
            << ", backend " << Kokkos::DefaultExecutionSpace::name() << ", "
            << Kokkos::DefaultExecutionSpace().concurrency() << " thread(s)\n"
            << "mpi     " << mpi << "\n";
}

}  // namespace wbaudit::cli
