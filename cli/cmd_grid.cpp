// wbaudit grid TRACE: the analytic grid (docs/forecasting.md, "The analytic grid") of one fp32 reference trace, the
// projected round-to-nearest erased fraction over formats x learning-rate scales, per group: a table on stdout,
// DIR/grid.csv (every selected step) and DIR/grid_summary.csv, and a gnuplot heat map per group.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "forecast/error.hpp"
#include "forecast/joint_grid.hpp"
#include "runners/report/figure.hpp"
#include "runners/store/store.hpp"
#include "sim/precision/block_format.hpp"
#include "sim/precision/storage_format.hpp"
#include "sim/trace/trace.hpp"
#include "sim/trace/trace_reader.hpp"
#include "util/csv.hpp"
#include "util/files.hpp"

namespace wbaudit::cli {
namespace {

namespace fs = std::filesystem;
using util::csv_field;
using util::csv_number;

struct GridArgs {
  std::string trace;
  std::string cell;  // TRACE a sweep directory: the reference cell (or a target, meaning its declared reference)
  std::vector<std::string> formats = {"bf16", "fp16", "e5m2", "e4m3", "e3m2", "e2m3", "e2m1", "int8", "int4"};
  std::vector<double> lr_scales = {0.125, 0.25, 0.5, 1, 2, 4, 8};
  std::vector<std::string> groups;
  std::string step = "all";
  std::string out;
  bool no_figure = false;
  bool formats_given = false;  // --formats on the command line (else the default list, cut to the trace's record)
};

// A heat map (formats down, scales across) of the shown values, rendered to STEM.svg and STEM.png.
void heat_map(const fs::path& dir, const std::string& stem, const std::string& title, const forecast::FormatGrid& grid,
              const std::vector<double>& shown) {
  std::ostringstream data;
  for (std::size_t f = 0; f < grid.formats.size(); ++f) {
    for (std::size_t s = 0; s < grid.lr_scales.size(); ++s) {
      const double v = shown[f * grid.lr_scales.size() + s];
      data << (s ? " " : "") << (std::isfinite(v) ? csv_number(v) : "NaN");
    }
    data << "\n";
  }
  util::write_atomic(dir / (stem + ".dat"), data.str());
  std::ostringstream gp;
  gp << "set title " << runners::report::gnuplot_string(title) << " noenhanced\n"
     << "set xlabel 'learning-rate scale s'\nset ylabel 'format'\n"
     << "set cbrange [0:1]\nset cblabel 'projected erased fraction'\n"
     << "set palette defined (0 '#ffffff', 0.5 '#fdae61', 1 '#a50026')\n"
     << "set xrange [-0.5:" << grid.lr_scales.size() - 0.5 << "]\nset yrange [" << grid.formats.size() - 0.5
     << ":-0.5]\n";
  gp << "set xtics (";
  for (std::size_t s = 0; s < grid.lr_scales.size(); ++s) {
    gp << (s ? ", " : "") << runners::report::gnuplot_string(csv_number(grid.lr_scales[s])) << " " << s;
  }
  gp << ")\nset ytics (";
  for (std::size_t f = 0; f < grid.formats.size(); ++f) {
    gp << (f ? ", " : "") << runners::report::gnuplot_string(grid.formats[f]) << " " << f;
  }
  gp << ")\n";
  std::ostringstream plot;
  plot << "plot " << runners::report::gnuplot_string(stem + ".dat") << " matrix with image notitle, "
       << runners::report::gnuplot_string(stem + ".dat")
       << " matrix using 1:2:(sprintf('%.2f', $3)) with labels notitle\n";
  const std::string body = gp.str();
  std::ostringstream script;
  script << "set terminal svg size 720,480 dynamic noenhanced background '#ffffff'\nset output "
         << runners::report::gnuplot_string(stem + ".svg") << "\n"
         << body << plot.str() << "set terminal pngcairo noenhanced size 720,480\nset output "
         << runners::report::gnuplot_string(stem + ".png") << "\n"
         << plot.str() << "unset output\n";
  util::write_atomic(dir / (stem + ".gp"), script.str());
  runners::report::run_gnuplot(dir, stem + ".gp");
}

std::string file_stem(const std::string& group) {
  std::string s = "grid_";
  for (char c : group) {
    s += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '_';
  }
  return s;
}

// TRACE itself, or the trace of the canonical attempt of the named cell's reference when TRACE is a sweep directory.
std::string trace_path(const GridArgs& a) {
  if (!fs::is_directory(a.trace)) {
    if (!a.cell.empty()) {
      throw std::runtime_error("--cell " + a.cell + ": " + a.trace + " is a file, not a sweep directory");
    }
    return a.trace;
  }
  const auto store = runners::SweepStore::open(a.trace);
  std::vector<std::string> references;
  for (const auto& c : store.cells()) {
    if (c.role == "reference") {
      references.push_back(c.name);
    }
  }
  if (a.cell.empty()) {
    std::string list;
    for (const auto& n : references) {
      list += "\n  " + n;
    }
    throw std::runtime_error(a.trace +
                             " is a sweep directory: name its reference cell (or a target, for its "
                             "declared reference) with --cell; references:" +
                             list);
  }
  const runners::StoredCell* cell = store.find_by_name(a.cell);
  if (!cell) {
    throw std::runtime_error("--cell " + a.cell + ": no cell of that name in " + a.trace);
  }
  if (cell->role == "target") {
    cell = store.find_by_name(cell->reference);
  }
  if (!cell) {
    throw std::runtime_error("--cell " + a.cell + ": its reference is not a cell of " + a.trace);
  }
  const auto status = store.cell_status(cell->id);
  if (!status.canonical_attempt) {
    throw std::runtime_error(a.trace + ": reference " + cell->name + " has no canonical complete trace (" +
                             (status.reasons.empty() ? runners::to_string(status.state) : status.reasons.front()) +
                             "); run it with wbaudit run --resume");
  }
  return (status.attempts[*status.canonical_attempt].dir / "trace.h5").string();
}

void write_grids(const GridArgs& a, const sim::Trace& trace, const std::vector<std::string>& groups,
                 const std::vector<forecast::FormatGrid>& grids, const std::vector<std::size_t>& selected,
                 const fs::path& dir);

void run_grid(GridArgs a) {
  if (fs::is_directory(a.trace) && a.out.empty()) {
    a.out = (fs::path(a.trace) / "grid").string();
  }
  a.trace = trace_path(a);
  // The header only; each group's records are read a block of recorded steps at a time (format_grid on the
  // reader), so the memory held does not grow with the number of recorded steps.
  const sim::TraceReader reader(a.trace);
  const sim::Trace& trace = reader.header();
  if (!a.formats_given && !trace.margin.formats.empty()) {
    // The default list cut to the formats the margin histogram holds: all of them unless the reference recorded some
    // only (margin_formats); an explicit --formats with another one is refused by format_grid.
    std::vector<std::string> kept;
    for (const auto& f : a.formats) {
      if (std::find(trace.margin.formats.begin(), trace.margin.formats.end(), f) != trace.margin.formats.end()) {
        kept.push_back(f);
      }
    }
    a.formats = kept.empty() ? trace.margin.formats : kept;
  }
  std::vector<std::string> groups = a.groups;
  if (groups.empty()) {
    for (const auto& g : trace.groups) {
      groups.push_back(g.name);
    }
  }
  for (const auto& g : groups) {
    try {
      const sim::GroupTrace& group = forecast::find_group(trace, g);
      const auto index = static_cast<std::size_t>(&group - trace.groups.data());
      if (trace.mode != "reference" || !(reader.group_has_margin(index) || reader.group_has_pairs(index))) {
        forecast::require_joint_histogram(trace, group);  // the message for a trace without a joint record
      }
    } catch (const forecast::ForecastError& e) {
      throw std::runtime_error(a.trace + ": " + e.what());
    }
  }
  // The selected steps: all (summaries over them), or one recorded step.
  std::vector<std::size_t> selected;
  if (a.step == "all") {
    for (std::size_t t = 0; t < trace.recorded_steps.size(); ++t) {
      selected.push_back(t);
    }
  } else {
    std::int64_t step = 0;
    try {
      std::size_t used = 0;
      step = std::stoll(a.step, &used);
      if (used != a.step.size()) {
        throw std::invalid_argument("trailing text");
      }
    } catch (const std::exception&) {
      throw std::runtime_error("--step: \"" + a.step + "\" is neither a step number nor \"all\"");
    }
    for (std::size_t t = 0; t < trace.recorded_steps.size(); ++t) {
      if (trace.recorded_steps[t] == step) {
        selected.push_back(t);
      }
    }
    if (selected.empty()) {
      std::string known;
      for (std::size_t t = 0; t < trace.recorded_steps.size() && t < 12; ++t) {
        known += (t ? ", " : "") + std::to_string(trace.recorded_steps[t]);
      }
      throw std::runtime_error("--step " + a.step + ": not a recorded step of " + a.trace + " (recorded: " + known +
                               (trace.recorded_steps.size() > 12 ? ", ..." : "") + ")");
    }
  }
  const fs::path dir = a.out.empty() ? fs::path(a.trace).parent_path() / "grid" : fs::path(a.out);
  // Every grid is computed before the output directory is made: an unknown format or a group the trace cannot
  // project fails with nothing written (and no empty directory left behind).
  std::vector<forecast::FormatGrid> grids;
  for (const auto& group : groups) {
    try {
      grids.push_back(forecast::format_grid(reader, group, a.formats, a.lr_scales));
    } catch (const forecast::ForecastError& e) {
      throw std::runtime_error(a.trace + ": " + e.what());
    }
  }
  const bool made = !fs::exists(dir);
  fs::create_directories(dir);
  try {
    write_grids(a, trace, groups, grids, selected, dir);
  } catch (...) {
    std::error_code ignored;
    if (made) {
      fs::remove_all(dir, ignored);
    }
    throw;
  }
}

void write_grids(const GridArgs& a, const sim::Trace& trace, const std::vector<std::string>& groups,
                 const std::vector<forecast::FormatGrid>& grids, const std::vector<std::size_t>& selected,
                 const fs::path& dir) {
  std::ostringstream csv, summary, causes;
  csv << "group,format,lr_scale,step,erased_fraction\n";
  causes << "group,format,lr_scale,step,erased_fraction,erased_grid,erased_saturation,erased_scale\n";
  bool any_block = false;
  int width = 6;
  for (const auto& f : a.formats) {
    width = std::max(width, static_cast<int>(f.size()));
  }
  summary << "group,format,lr_scale,first_step,last_step,mean,max,final\n";
  const bool all = a.step == "all";
  std::printf(
      "Analytic grid of %s (%s): projected nearest erased fraction, %s\n", a.trace.c_str(), trace.schema.c_str(),
      all ? "mean over the recorded steps (grid_summary.csv also has max and final)" : ("at step " + a.step).c_str());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::string& group = groups[g];
    const forecast::FormatGrid& grid = grids[g];
    std::vector<double> shown(a.formats.size() * a.lr_scales.size());
    std::printf("\n%s\n  %-*s", group.c_str(), width, "format");
    for (double s : a.lr_scales) {
      std::printf(" %9s", ("s=" + util::shortest_number(s)).c_str());
    }
    std::printf("\n");
    for (std::size_t f = 0; f < a.formats.size(); ++f) {
      std::printf("  %-*s", width, a.formats[f].c_str());
      const bool block = sim::is_block_storage_name(a.formats[f]);
      any_block = any_block || block;
      for (std::size_t s = 0; s < a.lr_scales.size(); ++s) {
        double sum = 0, mx = -1, last = std::nan("");
        long n = 0;
        for (std::size_t t : selected) {
          const double v = grid.at(f, s, t);
          csv << csv_field(group) << "," << csv_field(a.formats[f]) << "," << csv_number(a.lr_scales[s]) << ","
              << grid.steps[t] << "," << csv_number(v) << "\n";
          if (block) {
            const auto& c = grid.causes[(f * a.lr_scales.size() + s) * grid.steps.size() + t];
            causes << csv_field(group) << "," << csv_field(a.formats[f]) << "," << csv_number(a.lr_scales[s]) << ","
                   << grid.steps[t] << "," << csv_number(v) << "," << csv_number(c[0]) << "," << csv_number(c[1]) << ","
                   << csv_number(c[2]) << "\n";
          }
          if (std::isnan(v)) {
            continue;
          }
          sum += v;
          mx = std::max(mx, v);
          last = v;
          ++n;
        }
        const double mean = n ? sum / static_cast<double>(n) : std::nan("");
        summary << csv_field(group) << "," << csv_field(a.formats[f]) << "," << csv_number(a.lr_scales[s]) << ","
                << grid.steps[selected.front()] << "," << grid.steps[selected.back()] << "," << csv_number(mean) << ","
                << csv_number(n ? mx : std::nan("")) << "," << csv_number(last) << "\n";
        shown[f * a.lr_scales.size() + s] = mean;
        std::printf(" %9.4f", mean);
      }
      std::printf("\n");
    }
    for (std::size_t f = 0; f < a.formats.size(); ++f) {
      if (!grid.undefined[f].empty()) {
        std::printf("  (%s: undefined: %s)\n", a.formats[f].c_str(), grid.undefined[f].c_str());
      }
    }
    if (!a.no_figure) {
      heat_map(dir, file_stem(group), group + (all ? ": mean over recorded steps" : ": step " + a.step), grid, shown);
    }
  }
  util::write_atomic(dir / "grid.csv", csv.str());
  util::write_atomic(dir / "grid_summary.csv", summary.str());
  if (any_block) {
    util::write_atomic(dir / "grid_causes.csv", causes.str());
    std::printf(
        "\nBlock formats: projected on the reference's block sample (docs/forecasting.md); their erased\n"
        "fraction by cause (grid, saturation, scale change) is in %s\n",
        (dir / "grid_causes.csv").c_str());
  }
  std::printf("\nWrote %s, %s%s\n", (dir / "grid.csv").c_str(), (dir / "grid_summary.csv").c_str(),
              a.no_figure ? "" : (" and " + (dir / "grid_<group>.{svg,png}").string()).c_str());
}

}  // namespace

void add_grid_command(CLI::App& app) {
  auto args = std::make_shared<GridArgs>();
  auto* cmd = app.add_subcommand(
      "grid", "The analytic grid of an fp32 reference trace: projected erased fraction over formats x lr scales");
  cmd->add_option(
         "trace", args->trace,
         "Reference trace.h5 (schema wbaudit.trace/4, /3 or /2, mode reference), or a sweep directory with --cell")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("--cell", args->cell,
                  "TRACE a sweep directory: the reference cell whose canonical trace is read (a target names its "
                  "declared reference)");
  std::string block_names;
  for (const auto& n : sim::known_block_format_names()) {
    block_names += (block_names.empty() ? "" : ", ") + n;
  }
  cmd->add_option("--formats", args->formats,
                  "Formats (comma-separated; any of `wbaudit formats`; intK takes the group's scale from its absmax at "
                  "initialization). Block-scaled formats (" +
                      block_names +
                      ") are projected from the block sample a reference records for each block format in its "
                      "[reference] project_formats, at any scale (nvfp4: 0.125 .. 8). Default: bf16, fp16, e5m2, "
                      "e4m3, e3m2, e2m3, e2m1, int8, int4; of a reference whose margin histogram holds some formats "
                      "only (margin_formats), those of them it holds")
      ->delimiter(',');
  cmd->add_option("--lr-scales", args->lr_scales,
                  "Learning-rate scales s (comma-separated, > 0): the target's lr over the reference's")
      ->delimiter(',');
  cmd->add_option("--groups", args->groups, "Parameter groups (comma-separated; default: all)")->delimiter(',');
  cmd->add_option("--step", args->step, "A recorded step, or \"all\" (default): the table shows the mean over steps");
  cmd->add_option("-o,--out", args->out, "Output directory (default: grid/ beside the trace)");
  cmd->add_flag("--no-figure", args->no_figure, "Skip the gnuplot heat maps");
  cmd->footer(
      "Example (on the sweep of `wbaudit run examples/tiny.toml --out runs/tiny`):\n"
      "  wbaudit grid runs/tiny --cell target/lr_scale=0.5/format=e4m3 --formats bf16,e4m3,int4 -o runs/tiny/grid\n"
      "TRACE may also be a reference trace.h5 itself (then without --cell).\n"
      "Writes DIR/grid.csv (group, format, lr_scale, step, erased_fraction), DIR/grid_summary.csv (mean, max and\n"
      "final over the selected steps) and DIR/grid_<group>.{svg,png}. A trace made before schema\n"
      "wbaudit.trace/2 has no joint histogram: re-run its reference with this wbaudit. The partial trace of an\n"
      "unfinished run (trace.h5.partial) is refused, naming its last recorded step. See docs/forecasting.md.");
  cmd->callback([args, cmd] {
    args->formats_given = cmd->get_option("--formats")->count() > 0;
    run_grid(*args);
  });
}

namespace {
[[maybe_unused]] const bool registered = register_command(140, add_grid_command);
}  // namespace

}  // namespace wbaudit::cli
