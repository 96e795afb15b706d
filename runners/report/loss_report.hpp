#pragma once
// The loss studies of a sweep (docs/studies.md) as a report: study 2 (matched decoder: fp32 vs nearest vs stochastic
// write-back), study 5 (policy contrast: full SR vs dead-zone SR) and study 6 (checkpoint replay under simulated INT3),
// rendered as report/loss.md + report/loss.html (one source), loss_summary.csv and loss_curves.csv, with gnuplot
// figures. This file renders only: the numbers (LossStudy) are computed by runners/evaluate/loss_study.hpp
// (analyze_losses) from the runs (LossCell); the definitions they follow:
//
// Conditions: target runs that share every grid value except `target.policy`, `target.sr_bits`, `target.sr_stream` and
// `seed`. Within a condition and a seed: L_fp32 = the final validation loss of the target's fp32 reference (same seed,
// init, data), L_N = the nearest target's, L_P every other policy's. Gap = L_N - L_fp32; recovery of P = (L_N - L_P) /
// gap (stats::recovery), undefined (and said so) when the gap is <= 0. Means over seeds with a percentile bootstrap
// interval (units = seeds). Two non-nearest policies: the ratio of their recoveries, paired by seed
// (stats::paired_ratio) — a policy contrast, not a causal mediation.
// Replays: per checkpoint, reduction = L_nearest - L_P after the replay, in nats and in percent of L_nearest.
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/trace/trace.hpp"
#include "stats/bootstrap.hpp"
#include "stats/paired.hpp"

namespace wbaudit::runners::report {

// One run of the sweep as the loss report sees it.
struct LossCell {
  std::string name;
  bool reference = false;    // the fp32 reference run
  std::string reference_of;  // targets: the name of their reference
  std::string condition;     // "k=v, k=v" of the grid values except policy, sr_bits and seed ("" when none)
  std::string seed;          // the grid's seed value (or the trace's seed)
  std::string policy;        // "fp32" for references; "nearest", "stochastic", "stochastic-r8", "deadzone-sr", ...
  std::shared_ptr<const sim::Trace> trace;  // null: left out, `problem` says why
  std::string problem;
};

struct SeedLosses {
  std::string seed;
  double fp32 = 0;
  double nearest = 0;
  std::map<std::string, double> policy;    // L_P, non-nearest policies
  double gap = 0;                          // L_N - L_fp32
  std::map<std::string, double> recovery;  // NaN when undefined (gap <= 0)
};

struct PolicyRecovery {
  std::string policy;
  std::vector<std::string> seeds;  // seeds where the recovery is defined
  std::vector<double> values;
  std::optional<stats::Interval> mean;  // bootstrap over seeds; nullopt below 2 seeds (`note` says so)
  std::string note;
};

struct PolicyContrast {
  std::string numerator, denominator;  // recovery of numerator / recovery of denominator, paired by seed
  std::optional<stats::PairedRatio> ratio;
  std::string note;  // why there is no interval, when there is none
};

struct ConditionLosses {
  std::string condition;
  std::vector<SeedLosses> seeds;
  std::vector<std::string> undefined;  // "seed 2: nearest not worse than fp32 (gap -0.001): recovery undefined"
  std::optional<stats::Interval> gap;  // mean gap over seeds
  std::map<std::string, std::optional<stats::Interval>> final_loss;  // mean final loss per policy ("fp32" too)
  std::vector<PolicyRecovery> recoveries;
  std::vector<PolicyContrast> contrasts;
};

struct ReplayPolicy {
  std::string label;  // "nearest", "stochastic", ... (with the format: "int3 stochastic")
  std::vector<double> loss;
};

struct ReplayLosses {
  std::string cell;
  std::string format;
  std::int64_t replay_steps = 0;
  std::vector<std::int64_t> checkpoints;
  std::vector<double> start_loss;
  std::vector<ReplayPolicy> policies;
  // For each non-nearest policy: L_nearest - L_P per checkpoint, in nats and percent of L_nearest, and their means.
  struct Reduction {
    std::string policy;
    std::vector<double> nats, percent;
    double mean_nats = 0, mean_percent = 0;
  };
  std::vector<Reduction> reductions;
  std::string note;  // e.g. "no nearest replay: reductions undefined"
};

struct LossStudy {
  std::vector<ConditionLosses> conditions;
  std::vector<ReplayLosses> replays;
  std::vector<std::string> left_out;  // "cell (reason)"
  stats::BootstrapSpec bootstrap;
  bool empty() const { return conditions.empty() && replays.empty(); }
};

// One or two lines for stdout, e.g. "recovery: stochastic 0.97 [0.95, 0.99] (n=3 seeds)"; "" when nothing to say.
std::string loss_headline(const LossStudy& study);

struct LossReportFiles {
  std::filesystem::path html, markdown, summary_csv, curves_csv;
};

// Writes report_dir/loss.{md,html}, report_dir/figures/loss-*.{svg,png}, sweep_dir/loss_summary.csv and
// sweep_dir/loss_curves.csv (every file atomically).
LossReportFiles write_loss_report(const LossStudy& study, const std::vector<LossCell>& cells,
                                  const std::string& sweep_name, const std::filesystem::path& sweep_dir,
                                  const std::filesystem::path& report_dir);

}  // namespace wbaudit::runners::report
