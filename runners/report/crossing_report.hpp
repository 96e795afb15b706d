#pragma once
// The report of a crossing study (docs/science.md section 3, study 1): measured vs predicted post-initialization
// crossings of the erased fraction, as Markdown and HTML with gnuplot figures.
#include <filesystem>
#include <string>
#include <vector>

namespace wbaudit::runners::report {

struct CrossingRow {
  std::string cell;  // evaluation cell: "<target run name> :: <group>"
  std::string format;
  std::string category;       // "both", "only-measured", "only-predicted", "neither", "above-at-init", ...
  double measured = 0;        // crossing step (NaN when none)
  double predicted = 0;       // crossing step (NaN when none)
  double relative_error = 0;  // |t_hat - t| / t (NaN unless both cross)
  bool within_tolerance = false;
  long group_size = -1;  // coordinates of the group
  bool below_min_group_size = false;
  int measured_recrossings = 0;  // falls back below theta after the measured crossing
};

struct CrossingTotals {
  int cells = 0;
  int both = 0;
  int within = 0;
  int differ = 0;  // measured and predicted category differ
  int neither = 0;
  int above_at_init = 0;  // measured already at or above the threshold at burn-in
  double span = 0;        // max t / min t over measured crossings (NaN when fewer than one)
  double threshold = 0.5;
  double tolerance = 0.15;
  long burn_in = 0;
  std::string burn_in_how;       // "default: 0.5% of the 1000 steps ..." or where it was declared
  long min_group_size = 0;       // groups with fewer coordinates are left out of the counts above
  int below_min_group_size = 0;  // cells left out for that
  int measured_recrossing = 0;   // cells whose measured trajectory falls back below theta after crossing
  int predicted_recrossing = 0;
  struct Decade {
    double lo = 0, hi = 0;
    int measured = 0, both = 0, within = 0;
    double median_relative_error = 0;
  };
  std::vector<Decade> decades;  // the headline by measured crossing-time decade
};

struct TrajectoryPanel {
  std::string title;
  std::string why;  // the rule that chose it: "earliest measured crossing", "worst predicted (rel. error 243%)", ...
  std::vector<double> steps;
  std::vector<double> measured;
  std::vector<double> predicted;
};

struct CrossingReport {
  std::string sweep_name;
  std::string description;
  std::vector<std::pair<std::string, std::string>> facts;  // provenance and run facts shown at the top
  CrossingTotals totals;
  std::vector<CrossingRow> rows;
  std::vector<TrajectoryPanel> panels;
  std::string panel_rule;                                  // how the panels were chosen, stated in the report
  std::vector<std::pair<std::string, std::string>> links;  // (label, relative href): CSV tables, other reports
};

// Writes DIR/report.md, DIR/report.html and DIR/figures/*; returns the path of report.html.
std::filesystem::path write_crossing_report(const CrossingReport& report, const std::filesystem::path& dir);

}  // namespace wbaudit::runners::report
