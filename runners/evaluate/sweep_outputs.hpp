#pragma once
// What `wbaudit run` and `wbaudit report` write after the cells, from the sweep's canonical traces: summary.csv (one
// row per evaluation cell), trajectories.csv, the crossing report and, for language-model sweeps, the loss report.
// Analysis here; report/ renders.
#include <cstddef>
#include <filesystem>
#include <ostream>
#include <string>

#include "runners/spec/sweep_spec.hpp"
#include "runners/store/store.hpp"

namespace wbaudit::runners {

struct SweepOutputs {
  std::filesystem::path summary_csv;
  std::filesystem::path trajectories_csv;
  std::filesystem::path report_html;
  std::filesystem::path loss_html;    // report/loss.html when any run has validation losses (studies 2, 5, 6)
  std::string loss_headline;          // the loss studies' headline lines (empty without them)
  std::filesystem::path blocks_html;  // report/blocks.html when a target run holds a block format (study 7)
  std::string blocks_headline;        // the erased fraction by cause per format and policy (empty without it)
  std::string crossing_summary;       // one line, e.g. "55/72 both cross, 52/55 within 15%, ..."
  std::size_t evaluation_cells = 0;
  std::size_t missing_targets = 0;  // target runs without a canonical complete attempt (left out, listed in report)
};

// Reads the traces of a sweep directory and writes summary.csv, trajectories.csv and report/.
SweepOutputs write_sweep_outputs(const SweepStore& store, const SweepSpec& spec);
// The lines `wbaudit run` and `wbaudit report` print after writing them: crossings, the loss headline, the paths.
void print_outputs(std::ostream& out, const SweepOutputs& outputs);

}  // namespace wbaudit::runners
