#include "runners/report/figure.hpp"

#include <cmath>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

#include "util/process.hpp"

namespace wbaudit::runners::report {
std::string gnuplot_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
    }
    out += c;
  }
  return out + "\"";
}

void run_gnuplot(const std::filesystem::path& dir, const std::string& script) {
  // gnuplot runs in DIR with the script's name as its only argument, never through a shell: a sweep path holding
  // spaces, quotes, $(...) or backticks reaches nothing that would interpret it.
  const util::CommandResult r = util::run_command({"gnuplot", script}, dir);
  if (r.exit_code != 0) {
    const std::filesystem::path log = dir / (std::filesystem::path(script).stem().string() + ".log");
    std::ofstream(log) << r.output;
    throw std::runtime_error("gnuplot failed on " + (dir / script).string() + " (exit " + std::to_string(r.exit_code) +
                             ", see " + log.string() + "; is gnuplot installed? apt-get install gnuplot-nox)");
  }
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string format_colour(const std::string& format) {
  static const std::map<std::string, std::string> colours = {
      {"fp32", "#000000"}, {"bf16", "#1f77b4"}, {"fp16", "#17becf"}, {"e5m2", "#2ca02c"}, {"e4m3", "#d62728"},
      {"e3m2", "#9467bd"}, {"e2m3", "#ff7f0e"}, {"e2m1", "#8c564b"}, {"int8", "#e377c2"}, {"int4", "#bcbd22"}};
  auto it = colours.find(format);
  return it == colours.end() ? std::string("#7f7f7f") : it->second;
}

std::vector<std::string> render(const Figure& figure, const std::filesystem::path& dir, const std::string& stem) {
  std::filesystem::create_directories(dir);
  auto data = dir / (stem + ".dat");
  {
    std::ofstream out(data);
    out << std::setprecision(17);
    // One gnuplot data block per series, separated by two blank lines (addressed with `index`).
    for (std::size_t s = 0; s < figure.series.size(); ++s) {
      const auto& series = figure.series[s];
      out << "# " << series.title << "\n";
      std::size_t written = 0;
      for (std::size_t i = 0; i < series.x.size() && i < series.y.size(); ++i) {
        bool missing = !std::isfinite(series.x[i]) || !std::isfinite(series.y[i]);
        if (missing && series.skip_missing) {
          continue;
        }
        if ((figure.logx && series.x[i] <= 0) || (figure.logy && series.y[i] <= 0)) {
          continue;
        }
        out << series.x[i] << ' ' << series.y[i];
        if (i < series.low.size() && i < series.high.size()) {
          out << ' ' << series.low[i] << ' ' << series.high[i];
        }
        out << '\n';
        ++written;
      }
      if (written == 0) {
        out << "nan nan\n";  // keeps the block index stable for an empty series
      }
      out << "\n\n";
    }
    if (!out) {
      throw std::runtime_error(data.string() + ": cannot write figure data");
    }
  }
  auto script = dir / (stem + ".gp");
  {
    std::ofstream out(script);
    out << "set datafile missing 'nan'\n";
    out << "set title " << gnuplot_string(figure.title) << "\n";
    out << "set xlabel " << gnuplot_string(figure.xlabel) << "\nset ylabel " << gnuplot_string(figure.ylabel) << "\n";
    out << "set grid\nset key below\nset autoscale xfix\n";
    if (figure.logx) {
      out << "set logscale x\n";
    }
    if (figure.logy) {
      out << "set logscale y\n";
    }
    if (std::isfinite(figure.ymin) || std::isfinite(figure.ymax)) {
      out << "set yrange [" << (std::isfinite(figure.ymin) ? std::to_string(figure.ymin) : "*") << ":"
          << (std::isfinite(figure.ymax) ? std::to_string(figure.ymax) : "*") << "]\n";
    }
    for (auto& line : figure.extra) {
      out << line << "\n";
    }
    std::ostringstream plot;
    plot << "plot ";
    for (std::size_t s = 0; s < figure.series.size(); ++s) {
      if (s) {
        plot << ", ";
      }
      const auto& series = figure.series[s];
      const std::string columns = !series.columns.empty() ? series.columns : series.low.empty() ? "1:2" : "1:2:3:4";
      plot << gnuplot_string(data.filename().string()) << " index " << s << " using " << columns << " with "
           << series.style << " title " << gnuplot_string(figure.series[s].title);
    }
    plot << "\n";
    out << "set terminal svg size " << figure.width << "," << figure.height
        << " dynamic noenhanced background '#ffffff'\n";
    out << "set output " << gnuplot_string(stem + ".svg") << "\n" << plot.str();
    out << "set terminal pngcairo noenhanced size " << figure.width << "," << figure.height << "\n";
    out << "set output " << gnuplot_string(stem + ".png") << "\n" << plot.str();
    out << "unset output\n";
    if (!out) {
      throw std::runtime_error(script.string() + ": cannot write gnuplot script");
    }
  }
  run_gnuplot(dir, script.filename().string());
  return {stem + ".svg", stem + ".png"};
}

}  // namespace wbaudit::runners::report
