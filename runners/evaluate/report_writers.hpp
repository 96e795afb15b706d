#pragma once
// The skill report of `wbaudit evaluate` as three writers over an EvaluationResult, each into the report's staged
// directory (write_evaluation_report, evaluate.cpp): the CSV tables and the effective analysis (report_tables.cpp),
// the gnuplot figures (report_figures.cpp) and the document, Markdown and HTML from one source
// (report_document.cpp). What each says is decided here; runners/report/ renders it (Document, Figure).
#include <filesystem>
#include <string>
#include <vector>

#include "runners/evaluate/evaluate.hpp"

namespace wbaudit::runners::evaluation {

// statistics.csv, cells.csv, gates.csv, cohort.csv, decomposition.csv, series.csv, crossings.csv,
// skill_by_step.csv, breakdown.csv, dropped.csv (under a drop policy), analysis.toml and analysis_given.toml.
void write_evaluation_tables(const EvaluationResult& r, const std::filesystem::path& dir);

struct ReportFigure {
  std::string stem;  // figures/STEM.svg and .png
  std::string caption;
};

// Renders the figures into dir (gnuplot) and returns them in the order the document shows them.
std::vector<ReportFigure> draw_evaluation_figures(const EvaluationResult& r, const std::filesystem::path& dir);

// report.md and report.html into dir; `final_dir` is where the report will be (its links are relative to it).
void write_evaluation_document(const EvaluationResult& r, const std::vector<ReportFigure>& figures,
                               const std::filesystem::path& dir, const std::filesystem::path& final_dir);

// Writes a report file (atomically, not fsynced: the staged directory is renamed into place when complete).
void write_report_file(const std::filesystem::path& path, const std::string& text);

}  // namespace wbaudit::runners::evaluation
