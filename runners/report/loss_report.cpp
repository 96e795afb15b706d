#include "runners/report/loss_report.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>

#include "runners/report/document.hpp"
#include "runners/report/figure.hpp"
#include "sim/precision/expected_erasure.hpp"
#include "sim/precision/policy.hpp"
#include "stats/error.hpp"
#include "stats/recovery.hpp"
#include "util/csv.hpp"
#include "util/files.hpp"

namespace wbaudit::runners::report {
using util::csv_field;
using util::csv_number;
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string fixed(double x, int digits = 4) {
  if (!std::isfinite(x)) return "—";
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << x;
  return out.str();
}

std::string with_interval(const std::optional<stats::Interval>& i, int digits = 4) {
  if (!i) return "—";
  return fixed(i->estimate, digits) + " [" + fixed(i->lower, digits) + ", " + fixed(i->upper, digits) + "]";
}

std::optional<stats::Interval> mean_interval(const std::vector<double>& values, const stats::BootstrapSpec& spec) {
  if (values.size() < 2) return std::nullopt;
  return stats::bootstrap(
      static_cast<std::int64_t>(values.size()),
      [&](std::span<std::int64_t const> idx) { return stats::detail::mean_of(values, idx); }, spec);
}

// Seeds in numeric order when they are numbers, else lexicographic.
bool seed_less(const std::string& a, const std::string& b) {
  char* ea = nullptr;
  char* eb = nullptr;
  const double x = std::strtod(a.c_str(), &ea);
  const double y = std::strtod(b.c_str(), &eb);
  if (*ea == '\0' && *eb == '\0' && !a.empty() && !b.empty() && x != y) return x < y;
  return a < b;
}

// The same names as the runs' policies (sim::projection_name: "nearest", "stochastic", "stochastic-r8", ...).
std::string replay_label(const sim::ReplaySeries& r) {
  return sim::projection_name(sim::make_policy(r.policy, r.sr_bits));
}

}  // namespace

stats::BootstrapSpec loss_bootstrap_spec() {
  stats::BootstrapSpec spec;
  spec.seed = 20260602;
  spec.resamples = 2000;
  spec.method = stats::IntervalMethod::percentile;
  return spec;
}

std::optional<double> final_validation_loss(const sim::Trace& trace, std::string* why) {
  auto fail = [&](const std::string& reason) -> std::optional<double> {
    if (why) *why = reason;
    return std::nullopt;
  };
  if (trace.validation_loss.empty()) return fail("no validation loss in the trace (set [validation] every)");
  if (trace.validation_steps.back() != trace.steps) {
    return fail("the last validation is at step " + std::to_string(trace.validation_steps.back()) + ", not after the " +
                std::to_string(trace.steps) + " steps of the run");
  }
  const double loss = trace.validation_loss.back();
  if (!std::isfinite(loss)) return fail("the final validation loss is not finite");
  return loss;
}

LossStudy analyze_losses(const std::vector<LossCell>& cells, const stats::BootstrapSpec& spec) {
  LossStudy study;
  study.bootstrap = spec;
  std::map<std::string, const LossCell*> by_name;
  for (const auto& c : cells) by_name[c.name] = &c;

  // condition -> seed -> policy -> final loss (targets), and the fp32 loss of the seed's reference.
  struct SeedRuns {
    std::optional<double> fp32;
    std::map<std::string, double> policies;
  };
  std::map<std::string, std::map<std::string, SeedRuns>> grid;
  std::vector<std::string> condition_order;
  for (const auto& c : cells) {
    if (c.reference) continue;
    if (!c.trace) {
      study.left_out.push_back(c.name + " (" + (c.problem.empty() ? "no trace" : c.problem) + ")");
      continue;
    }
    if (!c.trace->replays.empty()) {
      const sim::Trace& t = *c.trace;
      ReplayLosses r;
      r.cell = c.name;
      r.format = t.replays.front().format;
      r.replay_steps = t.replay_steps;
      r.checkpoints = t.replay_checkpoints;
      r.start_loss = t.replay_start_loss;
      const ReplayPolicy* nearest = nullptr;
      for (const auto& s : t.replays) r.policies.push_back({replay_label(s), s.validation_loss});
      for (const auto& p : r.policies)
        if (p.label == "nearest") nearest = &p;
      if (!nearest) {
        r.note = "no nearest replay: reductions undefined";
      } else {
        for (const auto& p : r.policies) {
          if (&p == nearest) continue;
          ReplayLosses::Reduction red;
          red.policy = p.label;
          for (std::size_t k = 0; k < p.loss.size() && k < nearest->loss.size(); ++k) {
            red.nats.push_back(nearest->loss[k] - p.loss[k]);
            red.percent.push_back(100.0 * (nearest->loss[k] - p.loss[k]) / nearest->loss[k]);
          }
          double sn = 0, sp = 0;
          for (std::size_t k = 0; k < red.nats.size(); ++k) {
            sn += red.nats[k];
            sp += red.percent[k];
          }
          red.mean_nats = red.nats.empty() ? kNaN : sn / static_cast<double>(red.nats.size());
          red.mean_percent = red.percent.empty() ? kNaN : sp / static_cast<double>(red.percent.size());
          r.reductions.push_back(std::move(red));
        }
      }
      study.replays.push_back(std::move(r));
      continue;  // a replay run is study 6's, not a matched-run cell
    }
    std::string why;
    const auto loss = final_validation_loss(*c.trace, &why);
    if (!loss) {
      study.left_out.push_back(c.name + " (" + why + ")");
      continue;
    }
    if (!grid.contains(c.condition)) condition_order.push_back(c.condition);
    SeedRuns& runs = grid[c.condition][c.seed];
    if (runs.policies.contains(c.policy)) {
      study.left_out.push_back(c.name + " (a second " + c.policy + " run for seed " + c.seed + " in its condition)");
      continue;
    }
    runs.policies[c.policy] = *loss;
    if (!runs.fp32) {
      const auto ref = by_name.find(c.reference_of);
      if (ref != by_name.end() && ref->second->trace) {
        std::string ref_why;
        runs.fp32 = final_validation_loss(*ref->second->trace, &ref_why);
      }
    }
  }

  for (const auto& name : condition_order) {
    ConditionLosses cond;
    cond.condition = name;
    std::vector<std::string> seeds;
    for (const auto& [seed, runs] : grid[name]) seeds.push_back(seed);
    std::sort(seeds.begin(), seeds.end(), seed_less);
    std::set<std::string> policy_names;
    for (const auto& seed : seeds) {
      const SeedRuns& runs = grid[name][seed];
      if (!runs.fp32) {
        study.left_out.push_back((name.empty() ? "" : name + ", ") + "seed " + seed +
                                 " (its fp32 reference has no final validation loss)");
        continue;
      }
      if (!runs.policies.contains("nearest")) {
        study.left_out.push_back((name.empty() ? "" : name + ", ") + "seed " + seed + " (no nearest run)");
        continue;
      }
      SeedLosses s;
      s.seed = seed;
      s.fp32 = *runs.fp32;
      s.nearest = runs.policies.at("nearest");
      s.gap = s.nearest - s.fp32;
      for (const auto& [policy, loss] : runs.policies) {
        if (policy == "nearest") continue;
        policy_names.insert(policy);
        s.policy[policy] = loss;
        if (s.gap > 0) {
          s.recovery[policy] = stats::recovery(s.nearest, loss, s.fp32);
        } else {
          s.recovery[policy] = kNaN;
        }
      }
      if (!(s.gap > 0) && !s.policy.empty()) {
        cond.undefined.push_back("seed " + seed + ": nearest is not worse than fp32 (gap " + fixed(s.gap, 5) +
                                 " nats), so the recovered share is undefined");
      }
      cond.seeds.push_back(std::move(s));
    }
    if (cond.seeds.empty()) continue;
    std::vector<double> gaps, fp32, nearest;
    for (const auto& s : cond.seeds) {
      gaps.push_back(s.gap);
      fp32.push_back(s.fp32);
      nearest.push_back(s.nearest);
    }
    cond.gap = mean_interval(gaps, spec);
    cond.final_loss["fp32"] = mean_interval(fp32, spec);
    cond.final_loss["nearest"] = mean_interval(nearest, spec);
    for (const auto& policy : policy_names) {
      std::vector<double> losses;
      PolicyRecovery rec;
      rec.policy = policy;
      for (const auto& s : cond.seeds) {
        if (!s.policy.contains(policy)) continue;
        losses.push_back(s.policy.at(policy));
        const double r = s.recovery.at(policy);
        if (std::isfinite(r)) {
          rec.seeds.push_back(s.seed);
          rec.values.push_back(r);
        }
      }
      cond.final_loss[policy] = mean_interval(losses, spec);
      rec.mean = mean_interval(rec.values, spec);
      if (!rec.mean) {
        rec.note = "defined for " + std::to_string(rec.values.size()) + " seed(s); an interval needs at least 2";
      }
      cond.recoveries.push_back(std::move(rec));
    }
    // Contrasts: every other non-nearest policy's recovery over full SR's ("stochastic") when it is present;
    // otherwise, with exactly two policies, the second over the first (alphabetical).
    std::vector<std::pair<std::size_t, std::size_t>> pairs;
    const auto full_sr = std::find_if(cond.recoveries.begin(), cond.recoveries.end(),
                                      [](const PolicyRecovery& r) { return r.policy == "stochastic"; });
    if (full_sr != cond.recoveries.end()) {
      const auto j = static_cast<std::size_t>(full_sr - cond.recoveries.begin());
      for (std::size_t i = 0; i < cond.recoveries.size(); ++i)
        if (i != j) pairs.push_back({i, j});
    } else if (cond.recoveries.size() == 2) {
      pairs.push_back({1, 0});
    }
    for (const auto& [i, j] : pairs) {
      const auto& num = cond.recoveries[i];
      const auto& den = cond.recoveries[j];
      PolicyContrast pc;
      pc.numerator = num.policy;
      pc.denominator = den.policy;
      std::vector<std::string> units;
      std::vector<double> a, b;
      for (std::size_t k = 0; k < num.seeds.size(); ++k) {
        const auto it = std::find(den.seeds.begin(), den.seeds.end(), num.seeds[k]);
        if (it == den.seeds.end()) continue;
        const double d = den.values[static_cast<std::size_t>(it - den.seeds.begin())];
        if (d == 0.0) continue;
        units.push_back(num.seeds[k]);
        a.push_back(num.values[k]);
        b.push_back(d);
      }
      if (units.size() >= 2) {
        pc.ratio = stats::paired_ratio(units, a, b, spec);
      } else {
        pc.note = std::to_string(units.size()) + " seed(s) with both recoveries defined (and a nonzero " + den.policy +
                  " recovery); a paired interval needs at least 2";
      }
      cond.contrasts.push_back(std::move(pc));
    }
    study.conditions.push_back(std::move(cond));
  }
  return study;
}

std::string loss_headline(const LossStudy& study) {
  std::ostringstream out;
  for (const auto& c : study.conditions) {
    if (c.recoveries.empty()) continue;
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
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

namespace {

const char* kPolicyColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"};

std::string policy_colour(const std::string& policy, std::map<std::string, std::string>& assigned) {
  if (policy == "fp32") return "#000000";
  auto it = assigned.find(policy);
  if (it != assigned.end()) return it->second;
  const std::string colour = kPolicyColours[assigned.size() % 7];
  assigned[policy] = colour;
  return colour;
}

}  // namespace

LossReportFiles write_loss_report(const LossStudy& study, const std::vector<LossCell>& cells,
                                  const std::string& sweep_name, const std::filesystem::path& sweep_dir,
                                  const std::filesystem::path& report_dir) {
  LossReportFiles files;
  std::filesystem::create_directories(report_dir / "figures");
  Document doc("Loss studies: " + sweep_name);
  const auto& bs = study.bootstrap;
  const std::string interval_note = "Intervals: " + std::to_string(static_cast<int>(std::lround(bs.confidence * 100))) +
                                    "% percentile bootstrap over seeds (units = seeds, " +
                                    std::to_string(bs.resamples) + " resamples, seed " + std::to_string(bs.seed) +
                                    "); with a handful of seeds an interval states the spread of the seeds, not a "
                                    "precise population interval.";

  // loss_summary.csv: one row per (condition, seed, policy).
  std::ostringstream summary;
  summary << "condition,seed,policy,final_validation_loss,fp32_loss,nearest_loss,gap,recovery\n";
  for (const auto& c : study.conditions) {
    for (const auto& s : c.seeds) {
      auto row = [&](const std::string& policy, double loss, double recovery) {
        summary << csv_field(c.condition) << "," << csv_field(s.seed) << "," << policy << "," << csv_number(loss) << ","
                << csv_number(s.fp32) << "," << csv_number(s.nearest) << "," << csv_number(s.gap) << ","
                << csv_number(recovery) << "\n";
      };
      row("fp32", s.fp32, kNaN);
      row("nearest", s.nearest, kNaN);
      for (const auto& [p, loss] : s.policy) row(p, loss, s.recovery.at(p));
    }
  }
  for (const auto& r : study.replays) {
    for (std::size_t k = 0; k < r.checkpoints.size(); ++k) {
      summary << csv_field("replay " + r.cell) << ",checkpoint " << r.checkpoints[k] << ",start,"
              << csv_number(k < r.start_loss.size() ? r.start_loss[k] : kNaN) << ",,,,\n";
      for (const auto& p : r.policies) {
        summary << csv_field("replay " + r.cell) << ",checkpoint " << r.checkpoints[k] << "," << r.format << " "
                << p.label << "," << csv_number(k < p.loss.size() ? p.loss[k] : kNaN) << ",,,,\n";
      }
    }
  }
  files.summary_csv = sweep_dir / "loss_summary.csv";
  util::write_atomic(files.summary_csv, summary.str());

  // loss_curves.csv: every validation curve and every group's erased fraction, long format.
  std::ostringstream curves;
  curves << "cell,policy,seed,series,step,value\n";
  for (const auto& c : cells) {
    if (!c.trace) continue;
    const auto& t = *c.trace;
    for (std::size_t k = 0; k < t.validation_steps.size(); ++k) {
      curves << csv_field(c.name) << "," << c.policy << "," << csv_field(c.seed) << ",validation_loss,"
             << t.validation_steps[k] << "," << csv_number(t.validation_loss[k]) << "\n";
    }
    if (t.mode != "target") continue;
    for (const auto& g : t.groups) {
      for (std::size_t k = 0; k < g.erased_fraction.size() && k < t.recorded_steps.size(); ++k) {
        curves << csv_field(c.name) << "," << c.policy << "," << csv_field(c.seed) << ",erased_fraction:" << g.name
               << "," << t.recorded_steps[k] << "," << csv_number(g.erased_fraction[k]) << "\n";
      }
    }
  }
  files.curves_csv = sweep_dir / "loss_curves.csv";
  util::write_atomic(files.curves_csv, curves.str());

  std::map<std::string, std::string> colours;
  std::map<std::string, const LossCell*> by_name;
  for (const auto& c : cells) by_name[c.name] = &c;

  int condition_index = 0;
  for (const auto& c : study.conditions) {
    ++condition_index;
    doc.heading("Matched runs" + (c.condition.empty() ? std::string() : ": " + c.condition));
    doc.paragraph(
        "Final validation loss (nats/token, fp32 forward on the held-out stream) per seed: the fp32 "
        "reference (same seed, initialization and data order), nearest write-back and every other policy; "
        "gap = L_nearest - L_fp32; recovered share = (L_nearest - L_policy) / gap (1: the policy closes the "
        "whole gap, 0: no better than nearest, < 0: worse).");
    std::vector<std::string> header = {"seed", "L_fp32", "L_nearest", "gap"};
    std::vector<std::string> policies;
    for (const auto& r : c.recoveries) policies.push_back(r.policy);
    for (const auto& p : policies) {
      header.push_back("L_" + p);
      header.push_back("recovery " + p);
    }
    std::vector<std::vector<std::string>> rows;
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
    doc.paragraph(interval_note);
    for (const auto& u : c.undefined) doc.paragraph("Undefined: " + u + ".");
    double optimum = kNaN;
    for (const auto& cell : cells)
      if (cell.trace && cell.condition == c.condition && std::isfinite(cell.trace->optimal_validation_loss))
        optimum = cell.trace->optimal_validation_loss;
    if (std::isfinite(optimum)) {
      doc.paragraph("The data source's optimum (its entropy rate, mean over the target positions): " + fixed(optimum) +
                    " nats/token; every final loss above is that far from perfect plus the model's shortfall.");
    }
    if (!c.contrasts.empty()) {
      doc.subheading("Policy contrast");
      std::vector<std::vector<std::string>> crow;
      for (const auto& pc : c.contrasts) {
        if (pc.ratio) {
          const auto& t = pc.ratio->mean_ratio_t;
          crow.push_back({pc.numerator + " / " + pc.denominator, std::to_string(pc.ratio->units.size()),
                          fixed(t.estimate, 3) + " [" + fixed(t.lower, 3) + ", " + fixed(t.upper, 3) + "]",
                          with_interval(pc.ratio->ratio_of_means_bootstrap, 3)});
        } else {
          crow.push_back({pc.numerator + " / " + pc.denominator, "—", pc.note, "—"});
        }
      }
      doc.table({"recovery ratio", "seeds", "mean of per-seed ratios (paired t, 95%)",
                 "ratio of mean recoveries (bootstrap)"},
                crow);
      doc.paragraph(
          "This is a policy contrast: how much of full stochastic rounding's recovery a different write-back "
          "policy keeps, on the same seeds. It is not a causal mediation analysis: the policies differ in "
          "more than the updates they erase (e.g. the variance they inject), and no mediator is modelled.");
    }

    // Validation-loss curves: each seed thin, the mean over seeds thick, fp32 black, the optimum dashed.
    Figure fig;
    fig.title = "Validation loss" + (c.condition.empty() ? std::string() : " (" + c.condition + ")");
    fig.xlabel = "step";
    fig.ylabel = "validation loss (nats/token)";
    fig.extra = {"set key top right"};
    std::map<std::string, std::vector<const LossCell*>> by_policy;
    for (const auto& cell : cells) {
      if (!cell.trace || cell.reference || cell.condition != c.condition) continue;
      by_policy[cell.policy].push_back(&cell);
      const auto ref = by_name.find(cell.reference_of);
      if (ref != by_name.end() && ref->second->trace) {
        auto& refs = by_policy["fp32"];
        if (std::find(refs.begin(), refs.end(), ref->second) == refs.end()) refs.push_back(ref->second);
      }
    }
    double xmax = 0;
    for (const auto& [policy, runs] : by_policy) {
      const std::string colour = policy_colour(policy, colours);
      std::vector<double> mean_x, mean_y;
      bool aligned = true;
      for (const auto* run : runs) {
        const auto& t = *run->trace;
        std::vector<double> x(t.validation_steps.begin(), t.validation_steps.end());
        if (!x.empty()) xmax = std::max(xmax, x.back());
        fig.series.push_back({"", x, t.validation_loss, "lines lw 1 lc rgb '" + colour + "'"});
        if (mean_x.empty()) {
          mean_x = x;
          mean_y.assign(x.size(), 0.0);
        }
        if (x != mean_x) aligned = false;
        for (std::size_t k = 0; k < mean_y.size() && k < t.validation_loss.size(); ++k)
          mean_y[k] += t.validation_loss[k] / static_cast<double>(runs.size());
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
    const std::string stem = "loss-validation-" + std::to_string(condition_index);
    render(fig, report_dir / "figures", stem);
    doc.figure(stem,
               "Validation loss per policy: each seed thin, the mean over seeds thick; the fp32 reference in "
               "black; the data source's optimum dashed when known.");

    // Erased fraction per group, nearest vs the other policies, for the first seed: the three largest groups.
    if (!c.seeds.empty()) {
      const std::string seed = c.seeds.front().seed;
      std::vector<const LossCell*> runs;
      for (const auto& cell : cells)
        if (cell.trace && !cell.reference && cell.condition == c.condition && cell.seed == seed &&
            cell.trace->mode == "target")
          runs.push_back(&cell);
      if (!runs.empty()) {
        std::vector<const sim::GroupTrace*> groups;
        for (const auto& g : runs.front()->trace->groups) groups.push_back(&g);
        std::stable_sort(groups.begin(), groups.end(), [](auto* a, auto* b) { return a->size > b->size; });
        if (groups.size() > 3) groups.resize(3);
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
            if (it == t.groups.end()) continue;
            std::vector<double> x(t.recorded_steps.begin(), t.recorded_steps.end());
            ef.series.push_back(
                {run->policy + " " + groups[gi]->name, x, it->erased_fraction,
                 std::string("lines lw 2 dt ") + kDash[gi] + " lc rgb '" + policy_colour(run->policy, colours) + "'"});
          }
        }
        const std::string estem = "loss-erased-" + std::to_string(condition_index);
        render(ef, report_dir / "figures", estem);
        doc.figure(estem,
                   "Erased fraction over training for the three largest parameter groups (by coordinates) of "
                   "seed " +
                       seed +
                       ", one line style per group, one colour per policy; every group of every "
                       "run is in loss_curves.csv.");
      }
    }
  }

  int replay_index = 0;
  for (const auto& r : study.replays) {
    ++replay_index;
    doc.heading("Checkpoint replay: " + r.cell);
    doc.paragraph("Each checkpoint of the run replayed for " + std::to_string(r.replay_steps) + " steps with " +
                  r.format +
                  " weights under each write-back policy, on identical data; the validation loss after "
                  "each replay, and the reduction L_nearest - L_policy in nats and in percent of L_nearest.");
    std::vector<std::string> header = {"checkpoint step", "start loss"};
    for (const auto& p : r.policies) header.push_back(r.format + " " + p.label);
    for (const auto& red : r.reductions) {
      header.push_back(red.policy + " reduction (nats)");
      header.push_back(red.policy + " reduction (%)");
    }
    std::vector<std::vector<std::string>> rows;
    for (std::size_t k = 0; k < r.checkpoints.size(); ++k) {
      std::vector<std::string> row = {std::to_string(r.checkpoints[k]),
                                      fixed(k < r.start_loss.size() ? r.start_loss[k] : kNaN)};
      for (const auto& p : r.policies) row.push_back(fixed(k < p.loss.size() ? p.loss[k] : kNaN));
      for (const auto& red : r.reductions) {
        row.push_back(fixed(k < red.nats.size() ? red.nats[k] : kNaN));
        row.push_back(fixed(k < red.percent.size() ? red.percent[k] : kNaN, 2));
      }
      rows.push_back(row);
    }
    std::vector<std::string> overall = {"mean over checkpoints", ""};
    for (std::size_t p = 0; p < r.policies.size(); ++p) overall.push_back("");
    for (const auto& red : r.reductions) {
      overall.push_back(fixed(red.mean_nats));
      overall.push_back(fixed(red.mean_percent, 2));
    }
    rows.push_back(overall);
    doc.table(header, rows);
    if (!r.note.empty()) doc.paragraph(r.note + ".");
    Figure fig;
    fig.title = "Validation loss after a " + std::to_string(r.replay_steps) + "-step " + r.format + " replay";
    fig.xlabel = "checkpoint step";
    fig.ylabel = "validation loss (nats/token)";
    std::vector<double> x(r.checkpoints.begin(), r.checkpoints.end());
    fig.series.push_back({"at the checkpoint (start)", x, r.start_loss, "linespoints pt 6 lw 1 lc rgb '#000000'"});
    for (const auto& p : r.policies) {
      fig.series.push_back({r.format + " " + p.label, x, p.loss,
                            "linespoints pt 7 lw 2 lc rgb '" + policy_colour(p.label, colours) + "'"});
    }
    const std::string stem = "loss-replay-" + std::to_string(replay_index);
    render(fig, report_dir / "figures", stem);
    doc.figure(stem, "Validation loss at each checkpoint and after replaying it under each policy.");
  }

  if (!study.left_out.empty()) {
    doc.heading("Left out");
    std::vector<std::vector<std::string>> rows;
    for (const auto& l : study.left_out) rows.push_back({l});
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
