#include "forecast/tables.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "forecast/analytic_grid.hpp"
#include "forecast/error.hpp"
#include "forecast/joint_grid.hpp"
#include "forecast/predictor_registry.hpp"
#include "sim/precision/format.hpp"
#include "sim/trace/trace_reader.hpp"

namespace wbaudit::forecast {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

stats::CellTable empty_table(const std::vector<EvaluationCell>& cells, const std::vector<std::int64_t>& grid) {
  stats::CellTable t;
  for (const auto& c : cells) {
    t.cells.push_back(c.label());
  }
  t.steps = grid;
  t.values =
      Eigen::MatrixXd::Constant(static_cast<Eigen::Index>(cells.size()), static_cast<Eigen::Index>(grid.size()), kNaN);
  return t;
}

void set_row(stats::CellTable& t, std::size_t r, const std::vector<double>& v) {
  for (std::size_t c = 0; c < v.size(); ++c) {
    t.values(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) = v[c];
  }
}

std::vector<double> aligned(const Series& s, const std::vector<std::int64_t>& grid, OutOfRange policy,
                            const std::string& what, const std::string& cell) {
  try {
    return align_series(s.steps, s.values, grid, policy);
  } catch (const ForecastError& e) {
    throw ForecastError(std::string(e.what()) + " (" + what + " of cell \"" + cell + "\")");
  }
}

// The cell's M: given, or the target format's (floating formats only; integer formats have absolute gaps).
int mantissa_width(const EvaluationCell& c) {
  if (c.man_bits >= 0) {
    return c.man_bits;
  }
  sim::FormatSpec f;
  try {
    f = sim::format_from_name(c.format);
  } catch (const sim::FormatError& e) {
    throw ForecastError(e.what());
  }
  if (f.kind != sim::FormatKind::floating) {
    throw ForecastError("format \"" + c.format + "\" is not a floating format; the analytic grid does not cover it");
  }
  return f.man_bits;
}

}  // namespace

const char* predictor_name(PredictorKind kind) {
  return predictor_info(kind).name.data();  // the registry's names are literals, so NUL-terminated
}

stats::CellTable projection_table(PredictorKind kind, const std::vector<EvaluationCell>& cells,
                                  const std::vector<std::int64_t>& grid, OutOfRange policy, SourceMethod method) {
  const std::string name = predictor_name(kind);
  stats::CellTable table = empty_table(cells, grid);
  // The reference file the analytic grid last read from (EvaluationCell::reference_file), kept open for the next cell
  // (a target's groups are consecutive cells): one file open at a time, whatever the number of references.
  std::filesystem::path open_file;
  std::unique_ptr<sim::TraceReader> reader;
  // The source's analytic grid from files: every (format, scale) the cells of one (reference file, group) ask for,
  // computed in one read of the group (format_grid reads each recorded step once), kept while the file is open.
  const bool source_grid = kind == PredictorKind::source && method == TableOptions::SourceMethod::analytic_grid;
  std::map<std::pair<std::filesystem::path, std::string>, std::pair<std::set<std::string>, std::set<double>>> wanted;
  if (source_grid) {
    for (const EvaluationCell& c : cells) {
      if (!c.reference_file.empty()) {
        auto& [formats, scales] = wanted[{c.reference_file, c.group}];
        formats.insert(c.format);
        scales.insert(c.lr_scale);
      }
    }
  }
  std::map<std::string, std::optional<FormatGrid>> grids;  // of open_file, by group (nullopt: the joint call failed)
  const auto reader_of = [&](const std::filesystem::path& file) -> const sim::TraceReader& {
    if (!reader || open_file != file) {
      reader.reset();
      grids.clear();
      reader = std::make_unique<sim::TraceReader>(file);
      open_file = file;
    }
    return *reader;
  };
  // The cell's series from its group's joint grid; the single (format, scale) call where the group has one pair
  // or the joint call failed (so that an error names the cell it belongs to, as before).
  const auto source_series = [&](const EvaluationCell& c) -> Series {
    const sim::TraceReader& r = reader_of(c.reference_file);
    const auto& [formats, scales] = wanted.at({c.reference_file, c.group});
    if (formats.size() * scales.size() == 1) {
      return analytic_series(r, c.group, c.format, c.lr_scale);
    }
    auto [it, fresh] = grids.try_emplace(c.group);
    if (fresh) {
      const std::vector<std::string> f(formats.begin(), formats.end());
      const std::vector<double> sc(scales.begin(), scales.end());
      try {
        it->second = format_grid(r, c.group, f, sc);
      } catch (const ForecastError&) {
        it->second.reset();
      } catch (const sim::TraceFileError&) {
        it->second.reset();
      }
    }
    if (!it->second) {
      return analytic_series(r, c.group, c.format, c.lr_scale);
    }
    const FormatGrid& g = *it->second;
    const auto fi =
        static_cast<std::size_t>(std::find(g.formats.begin(), g.formats.end(), c.format) - g.formats.begin());
    const auto si =
        static_cast<std::size_t>(std::find(g.lr_scales.begin(), g.lr_scales.end(), c.lr_scale) - g.lr_scales.begin());
    if (!g.undefined[fi].empty()) {
      return analytic_series(r, c.group, c.format, c.lr_scale);  // its error, as a single call gives it
    }
    Series out;
    out.steps = g.steps;
    out.values.reserve(g.steps.size());
    for (std::size_t t = 0; t < g.steps.size(); ++t) {
      out.values.push_back(g.at(fi, si, t));
    }
    return out;
  };
  for (std::size_t r = 0; r < cells.size(); ++r) {
    const EvaluationCell& c = cells[r];
    const auto& trace = kind == PredictorKind::matched_reference ? c.matched_reference : c.reference;
    if (!trace) {
      throw ForecastError(name + ": cell \"" + c.label() + "\" has no reference trace");
    }
    const bool analytic = kind == PredictorKind::analytic_grid ||
                          (kind == PredictorKind::source && method == TableOptions::SourceMethod::analytic_grid);
    const bool from_file = analytic && !c.reference_file.empty();
    Series s;
    try {
      if (kind == PredictorKind::analytic_grid && from_file) {
        s.steps = trace->recorded_steps;
        s.values = analytic_erased_fraction(reader_of(c.reference_file), c.group, mantissa_width(c), c.lr_scale);
      } else if (kind == PredictorKind::analytic_grid) {
        s.steps = trace->recorded_steps;
        s.values = analytic_erased_fraction(*trace, find_group(*trace, c.group), mantissa_width(c), c.lr_scale);
      } else if (analytic && from_file) {
        s = source_series(c);
      } else if (analytic) {
        s = analytic_series(*trace, c.group, c.format, c.lr_scale);
      } else {
        s = projected_series(*trace, c.group, c.format, c.projection);
      }
    } catch (const ForecastError& e) {
      throw ForecastError(name + ": cell \"" + c.label() + "\": " + e.what());
    } catch (const sim::TraceFileError& e) {
      throw ForecastError(name + ": cell \"" + c.label() + "\": " + e.what());
    }
    set_row(table, r, aligned(s, grid, policy, name, c.label()));
  }
  return table;
}

const PredictorTable& EvaluationTables::predictor(std::string_view name) const {
  std::string known;
  for (const auto& p : predictors) {
    if (p.name == name) {
      return p;
    }
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw ForecastError("no predictor \"" + std::string(name) + "\" (built: " + known + ")");
}

stats::CellTable common_time_table(const stats::CellTable& outcome) {
  if (outcome.rows() != static_cast<Eigen::Index>(outcome.cells.size()) ||
      outcome.cols() != static_cast<Eigen::Index>(outcome.steps.size())) {
    throw ForecastError("common_time_table: values are " + std::to_string(outcome.rows()) + "x" +
                        std::to_string(outcome.cols()) + " but the table labels " +
                        std::to_string(outcome.cells.size()) + " cells and " + std::to_string(outcome.steps.size()) +
                        " steps");
  }
  if (outcome.cells.empty()) {
    throw ForecastError("common_time_table: no cells");
  }
  stats::CellTable out = outcome;
  for (Eigen::Index t = 0; t < outcome.cols(); ++t) {
    double sum = 0;
    int n = 0;
    for (Eigen::Index r = 0; r < outcome.rows(); ++r) {
      const double v = outcome.values(r, t);
      if (std::isinf(v)) {
        throw ForecastError("common_time_table: infinite outcome for cell \"" +
                            outcome.cells[static_cast<std::size_t>(r)] + "\" at step " +
                            std::to_string(outcome.steps[static_cast<std::size_t>(t)]));
      }
      if (std::isnan(v)) {
        continue;
      }
      sum += v;
      ++n;
    }
    out.values.col(t).setConstant(n > 0 ? sum / n : kNaN);
  }
  return out;
}

EvaluationTables build_evaluation_tables(const std::vector<EvaluationCell>& cells,
                                         const std::vector<HistoryRun>& history, const TableOptions& options) {
  if (cells.empty()) {
    throw ForecastError("build_evaluation_tables: no evaluation cells");
  }
  std::set<std::string> labels;
  for (const auto& c : cells) {
    if (c.run_id.empty() || c.group.empty()) {
      throw ForecastError("build_evaluation_tables: a cell has an empty run id or group (\"" + c.label() + "\")");
    }
    if (!labels.insert(c.label()).second) {
      throw ForecastError("build_evaluation_tables: duplicate cell \"" + c.label() + "\"");
    }
    if (c.outcome.steps.size() != c.outcome.values.size()) {
      throw ForecastError("build_evaluation_tables: cell \"" + c.label() + "\" outcome has " +
                          std::to_string(c.outcome.steps.size()) + " steps but " +
                          std::to_string(c.outcome.values.size()) + " values");
    }
  }

  std::vector<std::int64_t> grid = options.grid;
  if (grid.empty()) {
    std::vector<std::vector<std::int64_t>> lists;
    lists.reserve(cells.size());
    for (const auto& c : cells) {
      lists.push_back(c.outcome.steps);
    }
    grid = common_steps(lists);
  }
  check_strictly_increasing(grid, "build_evaluation_tables (grid)");

  EvaluationTables out;
  out.outcome = empty_table(cells, grid);
  for (std::size_t r = 0; r < cells.size(); ++r) {
    set_row(out.outcome, r, aligned(cells[r].outcome, grid, options.out_of_range, "outcome", cells[r].label()));
  }

  const TableInputs inputs{cells, history, grid, options, out.outcome};
  for (const auto& info : predictor_registry()) {
    if (info.wanted != nullptr ? !info.wanted(inputs) : !(options.*info.option)) {
      continue;
    }
    PredictorTable p;
    p.kind = info.kind;
    p.name = info.name;
    p.privileged = info.privileged;
    p.post_outcome = info.post_outcome;
    p.table = info.build(inputs, p.missing_cells);
    out.predictors.push_back(std::move(p));
  }
  return out;
}

}  // namespace wbaudit::forecast
