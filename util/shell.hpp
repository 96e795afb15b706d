#pragma once
// Quoting for the POSIX shell: the one quoter wbaudit uses wherever a word reaches a shell (sbatch scripts).
#include <string>

namespace wbaudit::util {

// POSIX shell single-quoting: 'text', with each ' written as '\''. Nothing inside is expanded by the shell.
std::string shell_quote(const std::string& word);

}  // namespace wbaudit::util
