#include "runners/report/loss_report.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "runners/report/document.hpp"
#include "runners/report/figure.hpp"
#include "runners/report/interval_text.hpp"
#include "util/csv.hpp"
#include "util/files.hpp"
#include "util/text.hpp"

namespace wbaudit::runners::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using Rows = std::vector<std::vector<std::string>>;

double at_or_nan(const std::vector<double>& v, std::size_t k) {
  return k < v.size() ? v[k] : kNaN;
}

const char* kPolicyColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"};

// fp32 in black; every other policy the next colour of kPolicyColours, kept for the whole report.
std::string policy_colour(const std::string& policy, std::map<std::string, std::string>& assigned) {
  if (policy == "fp32") {
    return "#000000";
  }
  auto it = assigned.find(policy);
  if (it != assigned.end()) {
    return it->second;
  }
  std::string colour = kPolicyColours[assigned.size() % 7];
  assigned[policy] = colour;
  return colour;
}

// loss_summary.csv: one row per (condition, seed, policy), then every replay checkpoint.
std::string loss_summary_csv(const LossStudy& study) {
  util::CsvWriter csv(
      {"condition", "seed", "policy", "final_validation_loss", "fp32_loss", "nearest_loss", "gap", "recovery"});
  for (const auto& c : study.conditions) {
    for (const auto& s : c.seeds) {
      auto row = [&](const std::string& policy, double loss, double recovery) {
        csv.field(c.condition).field(s.seed).field(policy).number(loss).number(s.fp32).number(s.nearest);
        csv.number(s.gap).number(recovery).end_row();
      };
      row("fp32", s.fp32, kNaN);
      row("nearest", s.nearest, kNaN);
      for (const auto& [p, loss] : s.policy) {
        row(p, loss, s.recovery.at(p));
      }
    }
  }
  for (const auto& r : study.replays) {
    for (std::size_t k = 0; k < r.checkpoints.size(); ++k) {
      const std::string checkpoint = "checkpoint " + std::to_string(r.checkpoints[k]);
      csv.row({"replay " + r.cell, checkpoint, "start", util::csv_number(at_or_nan(r.start_loss, k)), "", "", "", ""});
      for (const auto& p : r.policies) {
        csv.row({"replay " + r.cell, checkpoint, r.format + " " + p.label, util::csv_number(at_or_nan(p.loss, k)), "",
                 "", "", ""});
      }
    }
  }
  return csv.text();
}

// loss_curves.csv: every validation curve and every group's erased fraction, long format.
std::string loss_curves_csv(const std::vector<LossCell>& cells) {
  util::CsvWriter csv({"cell", "policy", "seed", "series", "step", "value"});
  for (const auto& c : cells) {
    if (!c.trace) {
      continue;
    }
    const auto& t = *c.trace;
    for (std::size_t k = 0; k < t.validation_steps.size(); ++k) {
      csv.field(c.name).field(c.policy).field(c.seed).field("validation_loss").integer(t.validation_steps[k]);
      csv.number(t.validation_loss[k]).end_row();
    }
    if (t.mode != "target") {
      continue;
    }
    for (const auto& g : t.groups) {
      for (std::size_t k = 0; k < g.erased_fraction.size() && k < t.recorded_steps.size(); ++k) {
        csv.field(c.name).field(c.policy).field(c.seed).field("erased_fraction:" + g.name);
        csv.integer(t.recorded_steps[k]).number(g.erased_fraction[k]).end_row();
      }
    }
  }
  return csv.text();
}

// What the loss report draws with: the runs, the colour of each policy, where the figures go.
struct Canvas {
  const std::vector<LossCell>& cells;
  std::map<std::string, std::string> colours;
  std::filesystem::path figures;
};

// Final losses per seed, their means over seeds, and each policy's recovered share.
void seed_table(const ConditionLosses& c, Document& doc) {
  std::vector<std::string> header = {"seed", "L_fp32", "L_nearest", "gap"};
  std::vector<std::string> policies;
  for (const auto& r : c.recoveries) {
    policies.push_back(r.policy);
  }
  for (const auto& p : policies) {
    header.push_back("L_" + p);
    header.push_back("recovery " + p);
  }
  Rows rows;
  for (const auto& s : c.seeds) {
    std::vector<std::string> row = {s.seed, fixed(s.fp32), fixed(s.nearest), fixed(s.gap)};
    for (const auto& p : policies) {
      row.push_back(s.policy.contains(p) ? fixed(s.policy.at(p)) : "—");
      row.push_back(s.recovery.contains(p)
                        ? (std::isfinite(s.recovery.at(p)) ? fixed(s.recovery.at(p), 3) : std::string("undefined"))
                        : "—");
    }
    rows.push_back(row);
  }
  std::vector<std::string> mean_row = {"mean (n=" + std::to_string(c.seeds.size()) + ")",
                                       with_interval(c.final_loss.at("fp32")),
                                       with_interval(c.final_loss.at("nearest")), with_interval(c.gap)};
  for (const auto& r : c.recoveries) {
    mean_row.push_back(with_interval(c.final_loss.contains(r.policy) ? c.final_loss.at(r.policy) : std::nullopt));
    mean_row.push_back(r.mean ? with_interval(r.mean, 3) + " (n=" + std::to_string(r.values.size()) + ")"
                              : (r.values.size() == 1 ? fixed(r.values[0], 3) + " (n=1)" : std::string("—")));
  }
  rows.push_back(mean_row);
  doc.table(header, rows);
}

void contrast_table(const ConditionLosses& c, Document& doc) {
  if (c.contrasts.empty()) {
    return;
  }
  doc.subheading("Policy contrast");
  Rows rows;
  for (const auto& pc : c.contrasts) {
    if (pc.ratio) {
      const auto& t = pc.ratio->mean_ratio_t;
      rows.push_back({pc.numerator + " / " + pc.denominator, std::to_string(pc.ratio->units.size()),
                      fixed(t.estimate, 3) + " [" + fixed(t.lower, 3) + ", " + fixed(t.upper, 3) + "]",
                      with_interval(pc.ratio->ratio_of_means_bootstrap, 3)});
    } else {
      rows.push_back({pc.numerator + " / " + pc.denominator, "—", pc.note, "—"});
    }
  }
  doc.table(
      {"recovery ratio", "seeds", "mean of per-seed ratios (paired t, 95%)", "ratio of mean recoveries (bootstrap)"},
      rows);
  doc.paragraph(
      "This is a policy contrast: how much of full stochastic rounding's recovery a different write-back "
      "policy keeps, on the same seeds. It is not a causal mediation analysis: the policies differ in "
      "more than the updates they erase (e.g. the variance they inject), and no mediator is modelled.");
}

// The runs of a condition by policy, each target's fp32 reference under "fp32".
std::map<std::string, std::vector<const LossCell*>> runs_by_policy(const std::vector<LossCell>& cells,
                                                                   const std::string& condition) {
  std::map<std::string, const LossCell*> by_name;
  for (const auto& c : cells) {
    by_name[c.name] = &c;
  }
  std::map<std::string, std::vector<const LossCell*>> by_policy;
  for (const auto& cell : cells) {
    if (!cell.trace || cell.reference || cell.condition != condition) {
      continue;
    }
    by_policy[cell.policy].push_back(&cell);
    const auto ref = by_name.find(cell.reference_of);
    if (ref != by_name.end() && ref->second->trace) {
      auto& refs = by_policy["fp32"];
      if (std::find(refs.begin(), refs.end(), ref->second) == refs.end()) {
        refs.push_back(ref->second);
      }
    }
  }
  return by_policy;
}

// Validation-loss curves: each seed thin, the mean over seeds thick, fp32 black, the optimum dashed.
void validation_figure(const ConditionLosses& c, int index, double optimum, Canvas& canvas, Document& doc) {
  Figure fig;
  fig.title = "Validation loss" + (c.condition.empty() ? std::string() : " (" + c.condition + ")");
  fig.xlabel = "step";
  fig.ylabel = "validation loss (nats/token)";
  fig.extra = {"set key top right"};
  double xmax = 0;
  for (const auto& [policy, runs] : runs_by_policy(canvas.cells, c.condition)) {
    const std::string colour = policy_colour(policy, canvas.colours);
    std::vector<double> mean_x;
    std::vector<double> mean_y;
    bool aligned = true;
    for (const auto* run : runs) {
      const auto& t = *run->trace;
      std::vector<double> x(t.validation_steps.begin(), t.validation_steps.end());
      if (!x.empty()) {
        xmax = std::max(xmax, x.back());
      }
      fig.series.push_back({"", x, t.validation_loss, "lines lw 1 lc rgb '" + colour + "'"});
      if (mean_x.empty()) {
        mean_x = x;
        mean_y.assign(x.size(), 0.0);
      }
      aligned = aligned && x == mean_x;
      for (std::size_t k = 0; k < mean_y.size() && k < t.validation_loss.size(); ++k) {
        mean_y[k] += t.validation_loss[k] / static_cast<double>(runs.size());
      }
    }
    if (aligned && !mean_x.empty()) {
      fig.series.push_back({policy + " (mean of " + std::to_string(runs.size()) + ")", mean_x, mean_y,
                            "lines lw 3 lc rgb '" + colour + "'"});
    }
  }
  if (std::isfinite(optimum) && xmax > 0) {
    fig.series.push_back(
        {"optimum (entropy rate)", {0.0, xmax}, {optimum, optimum}, "lines dt 2 lw 2 lc rgb '#777777'"});
  }
  const std::string stem = "loss-validation-" + std::to_string(index);
  render(fig, canvas.figures, stem);
  doc.figure(stem,
             "Validation loss per policy: each seed thin, the mean over seeds thick; the fp32 reference in "
             "black; the data source's optimum dashed when known.");
}

// Erased fraction per group, nearest vs the other policies, for the first seed: the three largest groups.
void erased_figure(const ConditionLosses& c, int index, Canvas& canvas, Document& doc) {
  if (c.seeds.empty()) {
    return;
  }
  const std::string seed = c.seeds.front().seed;
  std::vector<const LossCell*> runs;
  for (const auto& cell : canvas.cells) {
    if (cell.trace && !cell.reference && cell.condition == c.condition && cell.seed == seed &&
        cell.trace->mode == "target") {
      runs.push_back(&cell);
    }
  }
  if (runs.empty()) {
    return;
  }
  std::vector<const sim::GroupTrace*> groups;
  for (const auto& g : runs.front()->trace->groups) {
    groups.push_back(&g);
  }
  std::stable_sort(groups.begin(), groups.end(), [](auto* a, auto* b) { return a->size > b->size; });
  if (groups.size() > 3) {
    groups.resize(3);
  }
  Figure ef;
  ef.title = "Erased fraction of the largest groups, seed " + seed;
  ef.xlabel = "step";
  ef.ylabel = "erased / nonzero proposals";
  ef.ymin = 0;
  ef.extra = {"set key outside bottom center horizontal"};
  ef.height = 560;
  static const char* kDash[] = {"1", "2", "4"};
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    for (const auto* run : runs) {
      const auto& t = *run->trace;
      const auto it = std::find_if(t.groups.begin(), t.groups.end(),
                                   [&](const sim::GroupTrace& g) { return g.name == groups[gi]->name; });
      if (it == t.groups.end()) {
        continue;
      }
      if (std::none_of(it->erased_fraction.begin(), it->erased_fraction.end(),
                       [](double y) { return std::isfinite(y); })) {
        continue;  // no step with a nonzero proposal (e.g. every weight flushed to zero): nothing to draw
      }
      std::vector<double> x(t.recorded_steps.begin(), t.recorded_steps.end());
      ef.series.push_back(
          {run->policy + " " + groups[gi]->name, x, it->erased_fraction,
           std::string("lines lw 2 dt ") + kDash[gi] + " lc rgb '" + policy_colour(run->policy, canvas.colours) + "'"});
    }
  }
  if (ef.series.empty()) {
    doc.paragraph("No erased-fraction figure for seed " + seed +
                  ": no recorded step of these groups has a nonzero proposal (erased fraction undefined).");
    return;
  }
  const std::string stem = "loss-erased-" + std::to_string(index);
  render(ef, canvas.figures, stem);
  doc.figure(stem,
             "Erased fraction over training for the three largest parameter groups (by coordinates) of "
             "seed " +
                 seed +
                 ", one line style per group, one colour per policy; every group of every "
                 "run is in loss_curves.csv.");
}

std::string interval_note(const stats::BootstrapSpec& bs) {
  return "Intervals: " + std::to_string(static_cast<int>(std::lround(bs.confidence * 100))) +
         "% percentile bootstrap over seeds (units = seeds, " + std::to_string(bs.resamples) + " resamples, seed " +
         std::to_string(bs.seed) +
         "); with a handful of seeds an interval states the spread of the seeds, not a "
         "precise population interval.";
}

// One condition of matched runs (studies 2 and 5).
void condition_section(const LossStudy& study, const ConditionLosses& c, int index, Canvas& canvas, Document& doc) {
  doc.heading("Matched runs" + (c.condition.empty() ? std::string() : ": " + c.condition));
  doc.paragraph(
      "Final validation loss (nats/token, fp32 forward on the held-out stream) per seed: the fp32 "
      "reference (same seed, initialization and data order), nearest write-back and every other policy; "
      "gap = L_nearest - L_fp32; recovered share = (L_nearest - L_policy) / gap (1: the policy closes the "
      "whole gap, 0: no better than nearest, < 0: worse).");
  seed_table(c, doc);
  doc.paragraph(interval_note(study.bootstrap));
  for (const auto& u : c.undefined) {
    doc.paragraph("Undefined: " + u + ".");
  }
  double optimum = kNaN;
  for (const auto& cell : canvas.cells) {
    if (cell.trace && cell.condition == c.condition && std::isfinite(cell.trace->optimal_validation_loss)) {
      optimum = cell.trace->optimal_validation_loss;
    }
  }
  if (std::isfinite(optimum)) {
    doc.paragraph("The data source's optimum (its entropy rate, mean over the target positions): " + fixed(optimum) +
                  " nats/token; every final loss above is that far from perfect plus the model's shortfall.");
  }
  contrast_table(c, doc);
  validation_figure(c, index, optimum, canvas, doc);
  erased_figure(c, index, canvas, doc);
}

// One run's checkpoint replays (study 6).
void replay_section(const ReplayLosses& r, int index, Canvas& canvas, Document& doc) {
  doc.heading("Checkpoint replay: " + r.cell);
  doc.paragraph("Each checkpoint of the run replayed for " + std::to_string(r.replay_steps) + " steps with " +
                r.format +
                " weights under each write-back policy, on identical data; the validation loss after "
                "each replay, and the reduction L_nearest - L_policy in nats and in percent of L_nearest.");
  std::vector<std::string> header = {"checkpoint step", "start loss"};
  for (const auto& p : r.policies) {
    header.push_back(r.format + " " + p.label);
  }
  for (const auto& red : r.reductions) {
    header.push_back(red.policy + " reduction (nats)");
    header.push_back(red.policy + " reduction (%)");
  }
  Rows rows;
  for (std::size_t k = 0; k < r.checkpoints.size(); ++k) {
    std::vector<std::string> row = {std::to_string(r.checkpoints[k]), fixed(at_or_nan(r.start_loss, k))};
    for (const auto& p : r.policies) {
      row.push_back(fixed(at_or_nan(p.loss, k)));
    }
    for (const auto& red : r.reductions) {
      row.push_back(fixed(at_or_nan(red.nats, k)));
      row.push_back(fixed(at_or_nan(red.percent, k), 2));
    }
    rows.push_back(row);
  }
  std::vector<std::string> overall = {"mean over checkpoints", ""};
  overall.resize(overall.size() + r.policies.size(), "");
  for (const auto& red : r.reductions) {
    overall.push_back(fixed(red.mean_nats));
    overall.push_back(fixed(red.mean_percent, 2));
  }
  rows.push_back(overall);
  doc.table(header, rows);
  if (!r.note.empty()) {
    doc.paragraph(r.note + ".");
  }
  Figure fig;
  fig.title = "Validation loss after a " + std::to_string(r.replay_steps) + "-step " + r.format + " replay";
  fig.xlabel = "checkpoint step";
  fig.ylabel = "validation loss (nats/token)";
  std::vector<double> x(r.checkpoints.begin(), r.checkpoints.end());
  fig.series.push_back({"at the checkpoint (start)", x, r.start_loss, "linespoints pt 6 lw 1 lc rgb '#000000'"});
  for (const auto& p : r.policies) {
    fig.series.push_back({r.format + " " + p.label, x, p.loss,
                          "linespoints pt 7 lw 2 lc rgb '" + policy_colour(p.label, canvas.colours) + "'"});
  }
  const std::string stem = "loss-replay-" + std::to_string(index);
  render(fig, canvas.figures, stem);
  doc.figure(stem, "Validation loss at each checkpoint and after replaying it under each policy.");
}

}  // namespace

std::string loss_headline(const LossStudy& study) {
  std::ostringstream out;
  for (const auto& c : study.conditions) {
    if (c.recoveries.empty()) {
      continue;
    }
    out << "recovery" << (c.condition.empty() ? "" : " (" + c.condition + ")") << ":";
    bool first = true;
    for (const auto& r : c.recoveries) {
      out << (first ? " " : ", ") << r.policy << " ";
      out << (r.mean                 ? with_interval(r.mean, 3)
              : r.values.size() == 1 ? fixed(r.values[0], 3)
                                     : std::string("undefined"));
      out << " (n=" << r.values.size() << " seeds)";
      first = false;
    }
    out << "; gap L_nearest - L_fp32 " << with_interval(c.gap, 4) << " nats";
    for (const auto& pc : c.contrasts) {
      if (pc.ratio) {
        const auto& t = pc.ratio->mean_ratio_t;
        out << "; " << pc.numerator << "/" << pc.denominator << " " << fixed(t.estimate, 3) << " [" << fixed(t.lower, 3)
            << ", " << fixed(t.upper, 3) << "] (paired t)";
      }
    }
    out << "\n";
  }
  for (const auto& r : study.replays) {
    for (const auto& red : r.reductions) {
      out << "replay (" << r.format << ", " << r.checkpoints.size() << " checkpoints x " << r.replay_steps
          << " steps): " << red.policy << " lowers validation loss by " << fixed(red.mean_nats, 4) << " nats ("
          << fixed(red.mean_percent, 2) << "%) vs nearest\n";
    }
  }
  std::string s = out.str();
  if (!s.empty() && s.back() == '\n') {
    s.pop_back();
  }
  return s;
}

LossReportFiles write_loss_report(const LossStudy& study, const std::vector<LossCell>& cells,
                                  const std::string& sweep_name, const std::filesystem::path& sweep_dir,
                                  const std::filesystem::path& report_dir) {
  LossReportFiles files;
  std::filesystem::create_directories(report_dir / "figures");
  files.summary_csv = sweep_dir / "loss_summary.csv";
  util::write_atomic(files.summary_csv, loss_summary_csv(study));
  files.curves_csv = sweep_dir / "loss_curves.csv";
  util::write_atomic(files.curves_csv, loss_curves_csv(cells));

  Document doc("Loss studies: " + sweep_name);
  Canvas canvas{cells, {}, report_dir / "figures"};
  int condition_index = 0;
  for (const auto& c : study.conditions) {
    condition_section(study, c, ++condition_index, canvas, doc);
  }
  int replay_index = 0;
  for (const auto& r : study.replays) {
    replay_section(r, ++replay_index, canvas, doc);
  }
  if (!study.left_out.empty()) {
    doc.heading("Left out");
    Rows rows;
    for (const auto& l : study.left_out) {
      rows.push_back({l});
    }
    doc.table({"run (reason)"}, rows);
  }
  doc.links("Data:", {{"loss_summary.csv", "../loss_summary.csv"},
                      {"loss_curves.csv", "../loss_curves.csv"},
                      {"crossing report", "report.html"}});
  files.markdown = report_dir / "loss.md";
  files.html = report_dir / "loss.html";
  util::write_atomic(files.markdown, doc.markdown());
  util::write_atomic(files.html, doc.html());
  return files;
}

}  // namespace wbaudit::runners::report
