#pragma once
// Study 7 (docs/studies.md): what block scaling does to erased updates, as a section of a sweep's reports
// (report/blocks.md + report/blocks.html, one source; block_summary.csv; gnuplot figures). Written only for sweeps
// with a target run that holds some group in a block-scaled format (a trace with /groups/<g>/block_events), so the
// reports of every other sweep are unchanged. Definitions (docs/studies.md "Study 7"):
//
// Studied groups: every group that some target run of the sweep holds in a block format (the same matrices are then
// compared across formats, per-tensor runs included). Rows: target runs that share every grid value except `seed`
// (LossCell::condition and policy). Per run, summed over the studied groups and the recorded steps:
//   erased fraction   = erased / nonzero (undefined when nonzero == 0: the run is listed, never averaged)
//   by cause          = erased_grid / nonzero, erased_saturation / nonzero, erased_scale / nonzero (block runs only;
//                       they sum to the erased fraction)
//   collateral, flushed per coordinate-step = collateral / (size x recorded steps), flushed / (size x recorded steps)
//   rescaled blocks   = (rescaled_up + rescaled_down) / (blocks x recorded steps)
// Means over seeds of these per-run values with a percentile bootstrap interval (units = seeds; none below 2 seeds).
// Curves: the same per recorded step (summed over the studied groups), mean over the row's seeds.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "runners/report/loss_report.hpp"
#include "stats/bootstrap.hpp"

namespace wbaudit::runners::report {

// One target run, summed over the studied groups and its recorded steps.
struct BlockRunCounts {
  std::string cell, seed;
  bool block = false;  // the run holds the studied groups in a block format (causes, rescales known)
  std::int64_t nonzero = 0, erased = 0;
  std::int64_t grid = 0, saturation = 0, scale = 0;  // erased by cause (block runs)
  std::int64_t collateral = 0, flushed = 0;
  std::int64_t coordinate_steps = 0;  // sum over recorded steps of the groups' sizes
  std::int64_t block_steps = 0;       // sum over recorded steps of the groups' blocks
  std::int64_t rescaled_up = 0, rescaled_down = 0;
};

// One row: the runs of one condition and policy, over seeds.
struct BlockRow {
  std::string condition, format, policy;
  bool block = false;
  std::vector<BlockRunCounts> runs;    // in seed order
  std::vector<std::string> undefined;  // "seed 2: no nonzero proposal ..."
  // Means over the runs with a defined erased fraction (bootstrap over seeds); nullopt below 2 such runs.
  std::optional<stats::Interval> erased, grid, saturation, scale, collateral, flushed, rescaled;
  std::size_t defined = 0;  // runs averaged
  // Per recorded step (the first run's steps), mean over runs of the per-step values; NaN where undefined.
  std::vector<double> steps, curve_erased, curve_grid, curve_saturation, curve_scale, curve_collateral, curve_flushed,
      curve_rescaled;
};

struct BlockStudy {
  std::vector<std::string> groups;  // the studied groups
  std::vector<BlockRow> rows;
  stats::BootstrapSpec bootstrap;
  bool empty() const { return rows.empty(); }
};

// Per run fractions as defined above; NaN when the denominator is 0.
double fraction(std::int64_t numerator, std::int64_t denominator);

// The study of the sweep's target runs (empty when no run holds a group in a block format).
BlockStudy analyze_blocks(const std::vector<LossCell>& cells, const stats::BootstrapSpec& spec);

// One line for stdout, e.g. "erased by cause (nearest, mean of 3 seeds): mxfp8_e4m3 0.80 = grid 0.78 + saturation
// 0.01 + scale 0.01; ..."; "" when the study is empty.
std::string block_headline(const BlockStudy& study);

struct BlockReportFiles {
  std::filesystem::path html, markdown, summary_csv;
};

// Writes report_dir/blocks.{md,html}, report_dir/figures/blocks-*.{svg,png} and sweep_dir/block_summary.csv
// (every file atomically).
BlockReportFiles write_block_report(const BlockStudy& study, const std::string& sweep_name,
                                    const std::filesystem::path& sweep_dir, const std::filesystem::path& report_dir);

}  // namespace wbaudit::runners::report
