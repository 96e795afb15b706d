#include "runners/report/block_report.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "runners/report/document.hpp"
#include "runners/report/figure.hpp"
#include "runners/report/interval_text.hpp"
#include "stats/paired.hpp"
#include "util/csv.hpp"
#include "util/files.hpp"
#include "util/text.hpp"

namespace wbaudit::runners::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using Rows = std::vector<std::vector<std::string>>;

bool is_studied(const std::vector<std::string>& groups, const std::string& name) {
  return std::binary_search(groups.begin(), groups.end(), name);
}

// The counts of one recorded step k of a run (summed over the studied groups), added to `c`.
void add_step(const sim::Trace& t, const std::vector<std::string>& groups, std::size_t k, BlockRunCounts& c) {
  for (const auto& g : t.groups) {
    if (!is_studied(groups, g.name) || k >= g.nonzero.size() || k >= g.erased.size()) {
      continue;
    }
    c.nonzero += g.nonzero[k];
    c.erased += g.erased[k];
    c.coordinate_steps += g.size;
    const auto& b = g.block_events;
    if (b.empty() || k >= b.erased_grid.size()) {
      continue;
    }
    c.block = true;
    c.grid += b.erased_grid[k];
    c.saturation += b.erased_saturation[k];
    c.scale += b.erased_scale[k];
    c.collateral += b.collateral[k];
    c.flushed += b.flushed[k];
    c.rescaled_up += b.rescaled_up[k];
    c.rescaled_down += b.rescaled_down[k];
    c.block_steps += b.blocks;
  }
}

BlockRunCounts run_counts(const LossCell& cell, const std::vector<std::string>& groups) {
  BlockRunCounts c;
  c.cell = cell.name;
  c.seed = cell.seed;
  for (std::size_t k = 0; k < cell.trace->recorded_steps.size(); ++k) {
    add_step(*cell.trace, groups, k, c);
  }
  return c;
}

// The per-run values of the row's table and curves, in one order: erased, grid, saturation, scale, collateral,
// flushed, rescaled.
std::vector<double> run_values(const BlockRunCounts& c) {
  const double cause = c.block ? 1.0 : kNaN;
  return {fraction(c.erased, c.nonzero),
          cause * fraction(c.grid, c.nonzero),
          cause * fraction(c.saturation, c.nonzero),
          cause * fraction(c.scale, c.nonzero),
          cause * fraction(c.collateral, c.coordinate_steps),
          cause * fraction(c.flushed, c.coordinate_steps),
          cause * fraction(c.rescaled_up + c.rescaled_down, c.block_steps)};
}

constexpr std::size_t kValues = 7;

void row_means(BlockRow& row, const stats::BootstrapSpec& spec) {
  std::vector<std::vector<double>> columns(kValues);
  for (const auto& r : row.runs) {
    const auto v = run_values(r);
    if (!std::isfinite(v[0])) {
      row.undefined.push_back("seed " + r.seed + " (" + r.cell + "): no nonzero proposal in the studied groups");
      continue;
    }
    for (std::size_t i = 0; i < kValues; ++i) {
      columns[i].push_back(v[i]);
    }
  }
  row.defined = columns[0].size();
  std::optional<stats::Interval>* out[kValues] = {&row.erased,     &row.grid,    &row.saturation, &row.scale,
                                                  &row.collateral, &row.flushed, &row.rescaled};
  for (std::size_t i = 0; i < kValues; ++i) {
    if (row.block || i == 0) {
      *out[i] = stats::bootstrap_mean(columns[i], spec);
    }
  }
}

// Curves: per recorded step of the first run, the mean over runs (with the same steps) of the per-step values.
void row_curves(BlockRow& row, const std::vector<const LossCell*>& cells, const std::vector<std::string>& groups) {
  const auto& steps = cells.front()->trace->recorded_steps;
  std::vector<double>* out[kValues] = {&row.curve_erased,  &row.curve_grid,       &row.curve_saturation,
                                       &row.curve_scale,   &row.curve_collateral, &row.curve_flushed,
                                       &row.curve_rescaled};
  for (std::size_t k = 0; k < steps.size(); ++k) {
    row.steps.push_back(static_cast<double>(steps[k]));
    std::vector<double> sum(kValues, 0.0);
    std::vector<int> n(kValues, 0);
    for (const auto* cell : cells) {
      if (cell->trace->recorded_steps != steps) {
        continue;
      }
      BlockRunCounts c;
      add_step(*cell->trace, groups, k, c);
      const auto v = run_values(c);
      for (std::size_t i = 0; i < kValues; ++i) {
        if (std::isfinite(v[i])) {
          sum[i] += v[i];
          ++n[i];
        }
      }
    }
    for (std::size_t i = 0; i < kValues; ++i) {
      out[i]->push_back(n[i] > 0 ? sum[i] / n[i] : kNaN);
    }
  }
}

}  // namespace

double fraction(std::int64_t numerator, std::int64_t denominator) {
  return denominator > 0 ? static_cast<double>(numerator) / static_cast<double>(denominator) : kNaN;
}

BlockStudy analyze_blocks(const std::vector<LossCell>& cells, const stats::BootstrapSpec& spec) {
  BlockStudy study;
  study.bootstrap = spec;
  std::set<std::string> groups;
  for (const auto& c : cells) {
    if (c.trace && !c.reference && c.trace->mode == "target") {
      for (const auto& g : c.trace->groups) {
        if (!g.block_events.empty()) {
          groups.insert(g.name);
        }
      }
    }
  }
  if (groups.empty()) {
    return study;
  }
  study.groups.assign(groups.begin(), groups.end());
  // Rows in the sweep's order of first appearance; runs in the order of their seeds' first appearance.
  std::vector<std::pair<std::string, std::string>> keys;
  std::map<std::pair<std::string, std::string>, std::vector<const LossCell*>> runs;
  for (const auto& c : cells) {
    if (!c.trace || c.reference || c.trace->mode != "target") {
      continue;
    }
    const auto key = std::make_pair(c.condition, c.policy);
    if (!runs.contains(key)) {
      keys.push_back(key);
    }
    runs[key].push_back(&c);
  }
  for (const auto& key : keys) {
    BlockRow row;
    row.condition = key.first;
    row.policy = key.second;
    row.format = runs[key].front()->trace->format;
    for (const auto* c : runs[key]) {
      row.runs.push_back(run_counts(*c, study.groups));
      row.block = row.block || row.runs.back().block;
    }
    row_means(row, spec);
    row_curves(row, runs[key], study.groups);
    study.rows.push_back(std::move(row));
  }
  return study;
}

std::string block_headline(const BlockStudy& study) {
  std::ostringstream out;
  std::set<std::string> policies;
  std::vector<std::string> order;
  for (const auto& r : study.rows) {
    if (policies.insert(r.policy).second) {
      order.push_back(r.policy);
    }
  }
  for (const auto& policy : order) {
    out << (out.tellp() > 0 ? "\n" : "") << "erased fraction by cause (" << policy << ", mean over seeds):";
    bool first = true;
    for (const auto& r : study.rows) {
      if (r.policy != policy) {
        continue;
      }
      out << (first ? " " : "; ") << r.format << " ";
      first = false;
      if (!r.erased) {
        out << (r.defined == 1 ? fixed(run_values(r.runs.front())[0], 3) : std::string("undefined"));
      } else {
        out << fixed(r.erased->estimate, 3);
      }
      if (r.block && r.grid && r.saturation && r.scale) {
        out << " = grid " << fixed(r.grid->estimate, 3) << " + saturation " << fixed(r.saturation->estimate, 3)
            << " + scale " << fixed(r.scale->estimate, 3);
      }
    }
  }
  return out.str();
}

namespace {

std::string summary_csv(const BlockStudy& study) {
  util::CsvWriter csv({"cell", "condition", "format", "policy", "seed", "block", "nonzero", "erased", "erased_grid",
                       "erased_saturation", "erased_scale", "collateral", "flushed", "coordinate_steps", "block_steps",
                       "rescaled_up", "rescaled_down", "erased_fraction"});
  for (const auto& row : study.rows) {
    for (const auto& r : row.runs) {
      csv.field(r.cell).field(row.condition).field(row.format).field(row.policy).field(r.seed);
      csv.integer(r.block ? 1 : 0).integer(r.nonzero).integer(r.erased).integer(r.grid).integer(r.saturation);
      csv.integer(r.scale).integer(r.collateral).integer(r.flushed).integer(r.coordinate_steps);
      csv.integer(r.block_steps).integer(r.rescaled_up).integer(r.rescaled_down);
      csv.number(fraction(r.erased, r.nonzero)).end_row();
    }
  }
  return csv.text();
}

void cause_table(const BlockStudy& study, Document& doc) {
  Rows rows;
  for (const auto& r : study.rows) {
    const std::string dash = r.block ? "—" : "n/a (per-tensor)";
    rows.push_back({r.format, r.policy, std::to_string(r.defined) + "/" + std::to_string(r.runs.size()),
                    with_interval(r.erased), r.block ? with_interval(r.grid) : dash,
                    r.block ? with_interval(r.saturation) : dash, r.block ? with_interval(r.scale) : dash,
                    r.block ? with_interval(r.collateral, 6) : dash, r.block ? with_interval(r.flushed, 6) : dash,
                    r.block ? with_interval(r.rescaled) : dash});
  }
  doc.table({"format", "policy", "seeds", "erased fraction", "grid", "saturation", "scale",
             "collateral / coordinate-step", "flushed / coordinate-step", "rescaled blocks / block-step"},
            rows);
}

const char* kCauseColours[] = {"#1f77b4", "#d62728", "#2ca02c"};

std::string dash_of(const BlockRow& r) {
  return r.policy == "nearest" ? "1" : "2";
}

// The erased fraction by cause over training, one figure per block format: nearest solid, other policies dashed.
void cause_figure(const BlockStudy& study, const std::string& format, int index, const std::filesystem::path& dir,
                  Document& doc) {
  Figure fig;
  fig.title = "Erased fraction by cause, " + format + " (mean over seeds)";
  fig.xlabel = "step";
  fig.ylabel = "erased / nonzero proposals";
  fig.ymin = 0;
  fig.extra = {"set key outside bottom center horizontal"};
  fig.height = 560;
  for (const auto& r : study.rows) {
    if (r.format != format || !r.block) {
      continue;
    }
    const std::vector<double>* curves[] = {&r.curve_grid, &r.curve_saturation, &r.curve_scale};
    const char* names[] = {"grid", "saturation", "scale"};
    for (int i = 0; i < 3; ++i) {
      fig.series.push_back({r.policy + " " + names[i], r.steps, *curves[i],
                            std::string("lines lw 2 dt ") + dash_of(r) + " lc rgb '" + kCauseColours[i] + "'"});
    }
  }
  const std::string stem = "blocks-causes-" + std::to_string(index);
  render(fig, dir, stem);
  doc.figure(stem, "Erased fraction of " + format +
                       " by cause per recorded step, summed over the studied groups, mean over seeds; nearest solid, "
                       "stochastic dashed. The three causes sum to the erased fraction.");
}

// One quantity of every block row over training (collateral, flushed or rescaled), colour by format.
void event_figure(const BlockStudy& study, const std::string& what, const std::string& ylabel,
                  std::vector<double> BlockRow::*curve, const std::filesystem::path& dir, Document& doc) {
  Figure fig;
  fig.title = what + " over training (mean over seeds)";
  fig.xlabel = "step";
  fig.ylabel = ylabel;
  fig.ymin = 0;
  fig.extra = {"set key outside bottom center horizontal"};
  fig.height = 560;
  for (const auto& r : study.rows) {
    if (r.block) {
      fig.series.push_back({r.format + " " + r.policy, r.steps, r.*curve,
                            "lines lw 2 dt " + dash_of(r) + " lc rgb '" + format_colour(r.format) + "'"});
    }
  }
  std::string stem = "blocks-" + what;
  std::replace(stem.begin(), stem.end(), ' ', '-');
  render(fig, dir, stem);
  doc.figure(stem, what +
                       " per recorded step of every block-format row, summed over the studied groups, mean over "
                       "seeds; nearest solid, stochastic dashed.");
}

// Collateral moves and flushes need u == 0: name the block rows where every coordinate carried a nonzero proposal
// at every recorded step (nonzero == coordinate-steps in every run), so that a zero there is not read as a finding
// about the format.
void dense_note(const BlockStudy& study, Document& doc) {
  std::vector<std::string> dense;
  for (const auto& r : study.rows) {
    const bool all = r.block && std::all_of(r.runs.begin(), r.runs.end(), [](const BlockRunCounts& c) {
                       return c.coordinate_steps > 0 && c.nonzero == c.coordinate_steps;
                     });
    if (all) {
      dense.push_back(r.format + " " + r.policy);
    }
  }
  if (!dense.empty()) {
    doc.paragraph("In " + util::join(dense, ", ") +
                  " every coordinate carried a nonzero proposal at every recorded step (nonzero = coordinate-steps "
                  "in every run), so collateral moves and flushes (u == 0) cannot occur there: a rescale's effect "
                  "on a block's other elements is counted in their own classes (applied, or erased with cause "
                  "scale).");
  }
}

}  // namespace

BlockReportFiles write_block_report(const BlockStudy& study, const std::string& sweep_name,
                                    const std::filesystem::path& sweep_dir, const std::filesystem::path& report_dir) {
  BlockReportFiles files;
  const auto figures = report_dir / "figures";
  std::filesystem::create_directories(figures);
  files.summary_csv = sweep_dir / "block_summary.csv";
  util::write_atomic(files.summary_csv, summary_csv(study));
  Document doc("Block-scaled formats: " + sweep_name);
  doc.heading("Erased updates by cause");
  doc.paragraph("Studied groups (held in a block format by some target run): " + util::join(study.groups, ", ") +
                ". Per run, summed over these groups and the recorded steps: erased fraction = erased / nonzero; "
                "its causes (block formats): grid (the block's scale unchanged, the element rounds back), "
                "saturation (scale unchanged, the element at its block's largest magnitude and u outward), scale "
                "(the block's scale changed and the element still decodes to w), each / nonzero, summing to the "
                "erased fraction; collateral (u == 0 and w' != w) and flushed (of those, w != 0 and w' == 0) per "
                "coordinate-step; rescaled blocks (decode scale up or down) per block-step. Means over seeds with "
                "a " +
                std::to_string(static_cast<int>(std::lround(study.bootstrap.confidence * 100))) +
                "% percentile bootstrap interval (units = seeds, " + std::to_string(study.bootstrap.resamples) +
                " resamples, seed " + std::to_string(study.bootstrap.seed) + "); none below 2 seeds.");
  cause_table(study, doc);
  dense_note(study, doc);
  for (const auto& r : study.rows) {
    for (const auto& u : r.undefined) {
      doc.paragraph("Undefined: " + r.format + " " + r.policy + ", " + u + ".");
    }
  }
  doc.heading("Over training");
  std::vector<std::string> formats;
  for (const auto& r : study.rows) {
    if (r.block && std::find(formats.begin(), formats.end(), r.format) == formats.end()) {
      formats.push_back(r.format);
    }
  }
  for (std::size_t i = 0; i < formats.size(); ++i) {
    cause_figure(study, formats[i], static_cast<int>(i + 1), figures, doc);
  }
  event_figure(study, "collateral moves", "collateral / coordinate", &BlockRow::curve_collateral, figures, doc);
  event_figure(study, "flushes", "flushed / coordinate", &BlockRow::curve_flushed, figures, doc);
  event_figure(study, "rescaled blocks", "rescaled / block", &BlockRow::curve_rescaled, figures, doc);
  doc.links("Data:", {{"block_summary.csv", "../block_summary.csv"},
                      {"loss report (gap to fp32, SR recovery)", "loss.html"},
                      {"crossing report", "report.html"}});
  files.markdown = report_dir / "blocks.md";
  files.html = report_dir / "blocks.html";
  util::write_atomic(files.markdown, doc.markdown());
  util::write_atomic(files.html, doc.html());
  return files;
}

}  // namespace wbaudit::runners::report
