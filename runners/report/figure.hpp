#pragma once
// Report figures rendered by gnuplot into SVG (for the HTML report) and PNG (for Markdown viewers).
#include <filesystem>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace wbaudit::runners::report {

struct Series {
  Series() = default;
  Series(std::string title_, std::vector<double> x_, std::vector<double> y_, std::string style_ = "lines")
      : title(std::move(title_)), x(std::move(x_)), y(std::move(y_)), style(std::move(style_)) {}
  std::string title;
  std::vector<double> x;
  std::vector<double> y;
  std::string style = "lines";  // gnuplot style: "lines", "points pt 7 ps 0.6", "linespoints", ...
  bool skip_missing = true;     // drop points where x or y is NaN
  // Optional columns 3 and 4, e.g. an interval [low, high] drawn with "yerrorbars" (using 1:2:3:4) or a band
  // drawn with "filledcurves" (using 1:3:4). `columns` is the gnuplot using-spec (default 1:2, or 1:2:3:4 when
  // low/high are given).
  std::vector<double> low;
  std::vector<double> high;
  std::string columns;
};

// A fixed colour per number format, the same in every report and figure (unknown names: grey).
std::string format_colour(const std::string& format);

struct Figure {
  std::string title;
  std::string xlabel;
  std::string ylabel;
  bool logx = false;
  bool logy = false;
  double ymin = std::numeric_limits<double>::quiet_NaN();  // NaN: automatic
  double ymax = std::numeric_limits<double>::quiet_NaN();
  std::vector<Series> series;
  std::vector<std::string> extra;  // additional gnuplot commands (e.g. "set key bottom right")
  int width = 720;
  int height = 480;
};

// Writes DIR/STEM.dat, DIR/STEM.gp and renders DIR/STEM.svg and DIR/STEM.png with gnuplot. Throws naming the
// script when gnuplot is missing or fails. Returns the relative names {"STEM.svg", "STEM.png"}.
std::vector<std::string> render(const Figure& figure, const std::filesystem::path& dir, const std::string& stem);

// A gnuplot string literal ("...", with " and \ escaped): how every title, label and file name enters a script.
std::string gnuplot_string(const std::string& text);
// Runs gnuplot on DIR/SCRIPT with DIR as its working directory (argv, no shell); on failure writes its output to
// DIR/<script stem>.log and throws naming both.
void run_gnuplot(const std::filesystem::path& dir, const std::string& script);

// Escapes text for HTML.
std::string html_escape(const std::string& text);

}  // namespace wbaudit::runners::report
