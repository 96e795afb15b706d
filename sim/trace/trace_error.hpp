#pragma once
// Errors of the trace files (trace.h5, partial traces, checkpoints' traces): every message names the file.
#include <stdexcept>

namespace wbaudit::sim {

// A file that cannot be written or is not a valid wbaudit trace (missing, not HDF5, truncated, another schema, a
// missing or mis-sized dataset).
class TraceFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The trace of a run that has not finished (root attribute `complete` 0), read where a finished trace is required.
class TraceIncompleteError : public TraceFileError {
 public:
  using TraceFileError::TraceFileError;
};

}  // namespace wbaudit::sim
