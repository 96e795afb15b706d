#include "runners/evaluate/loss_study.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "sim/precision/expected_erasure.hpp"
#include "sim/precision/policy.hpp"
#include "stats/paired.hpp"
#include "stats/recovery.hpp"
#include "util/text.hpp"

namespace wbaudit::runners {
using report::ConditionLosses;
using report::LossCell;
using report::LossStudy;
using report::PolicyContrast;
using report::PolicyRecovery;
using report::ReplayLosses;
using report::ReplayPolicy;
using report::SeedLosses;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Seeds in numeric order when they are numbers, else lexicographic.
bool seed_less(const std::string& a, const std::string& b) {
  char* ea = nullptr;
  char* eb = nullptr;
  const double x = std::strtod(a.c_str(), &ea);
  const double y = std::strtod(b.c_str(), &eb);
  if (*ea == '\0' && *eb == '\0' && !a.empty() && !b.empty() && x != y) {
    return x < y;
  }
  return a < b;
}

// The same names as the runs' policies (sim::projection_name: "nearest", "stochastic", "stochastic-r8", ...).
std::string replay_label(const sim::ReplaySeries& r) {
  return sim::projection_name(sim::make_policy(r.policy, r.sr_bits));
}

// L_nearest - L_P per checkpoint, in nats and in percent of L_nearest, and their means.
ReplayLosses::Reduction reduction(const ReplayPolicy& p, const ReplayPolicy& nearest) {
  ReplayLosses::Reduction red;
  red.policy = p.label;
  for (std::size_t k = 0; k < p.loss.size() && k < nearest.loss.size(); ++k) {
    red.nats.push_back(nearest.loss[k] - p.loss[k]);
    red.percent.push_back(100.0 * (nearest.loss[k] - p.loss[k]) / nearest.loss[k]);
  }
  double sn = 0;
  double sp = 0;
  for (std::size_t k = 0; k < red.nats.size(); ++k) {
    sn += red.nats[k];
    sp += red.percent[k];
  }
  red.mean_nats = red.nats.empty() ? kNaN : sn / static_cast<double>(red.nats.size());
  red.mean_percent = red.percent.empty() ? kNaN : sp / static_cast<double>(red.percent.size());
  return red;
}

// Study 6: a run with checkpoint replays.
ReplayLosses replay_losses(const LossCell& c) {
  const sim::Trace& t = *c.trace;
  ReplayLosses r;
  r.cell = c.name;
  r.format = t.replays.front().format;
  r.replay_steps = t.replay_steps;
  r.checkpoints = t.replay_checkpoints;
  r.start_loss = t.replay_start_loss;
  for (const auto& s : t.replays) {
    r.policies.push_back({replay_label(s), s.validation_loss});
  }
  const ReplayPolicy* nearest = nullptr;
  for (const auto& p : r.policies) {
    if (p.label == "nearest") {
      nearest = &p;
    }
  }
  if (!nearest) {
    r.note = "no nearest replay: reductions undefined";
    return r;
  }
  for (const auto& p : r.policies) {
    if (&p != nearest) {
      r.reductions.push_back(reduction(p, *nearest));
    }
  }
  return r;
}

// The final losses of one seed of one condition: its fp32 reference's and each policy's.
struct SeedRuns {
  std::optional<double> fp32;
  std::map<std::string, double> policies;
};

// condition -> seed -> runs, and the conditions in the order of their first run.
struct LossGrid {
  std::map<std::string, std::map<std::string, SeedRuns>> runs;
  std::vector<std::string> conditions;
};

// Sorts the runs into conditions and seeds (matched runs), or into study.replays (replay runs), or study.left_out.
LossGrid sort_runs(const std::vector<LossCell>& cells, LossStudy& study) {
  std::map<std::string, const LossCell*> by_name;
  for (const auto& c : cells) {
    by_name[c.name] = &c;
  }
  LossGrid grid;
  for (const auto& c : cells) {
    if (c.reference) {
      continue;
    }
    if (!c.trace) {
      study.left_out.push_back(c.name + " (" + (c.problem.empty() ? "no trace" : c.problem) + ")");
      continue;
    }
    if (!c.trace->replays.empty()) {
      study.replays.push_back(replay_losses(c));
      continue;  // a replay run is study 6's, not a matched-run cell
    }
    std::string why;
    const auto loss = final_validation_loss(*c.trace, &why);
    if (!loss) {
      study.left_out.push_back(c.name + " (" + why + ")");
      continue;
    }
    if (!grid.runs.contains(c.condition)) {
      grid.conditions.push_back(c.condition);
    }
    SeedRuns& runs = grid.runs[c.condition][c.seed];
    if (runs.policies.contains(c.policy)) {
      study.left_out.push_back(c.name + " (a second " + c.policy + " run for seed " + c.seed + " in its condition)");
      continue;
    }
    runs.policies[c.policy] = *loss;
    const auto ref = by_name.find(c.reference_of);
    if (!runs.fp32 && ref != by_name.end() && ref->second->trace) {
      std::string ref_why;
      runs.fp32 = final_validation_loss(*ref->second->trace, &ref_why);
    }
  }
  return grid;
}

// Gap and recovered share of every policy for one seed; nullopt (and the reason in left_out) without a reference
// loss or a nearest run.
std::optional<SeedLosses> seed_losses(const std::string& condition, const std::string& seed, const SeedRuns& runs,
                                      std::vector<std::string>& left_out) {
  const std::string where = (condition.empty() ? "" : condition + ", ") + "seed " + seed;
  if (!runs.fp32) {
    left_out.push_back(where + " (its fp32 reference has no final validation loss)");
    return std::nullopt;
  }
  if (!runs.policies.contains("nearest")) {
    left_out.push_back(where + " (no nearest run)");
    return std::nullopt;
  }
  SeedLosses s;
  s.seed = seed;
  s.fp32 = *runs.fp32;
  s.nearest = runs.policies.at("nearest");
  s.gap = s.nearest - s.fp32;
  for (const auto& [policy, loss] : runs.policies) {
    if (policy == "nearest") {
      continue;
    }
    s.policy[policy] = loss;
    s.recovery[policy] = s.gap > 0 ? stats::recovery(s.nearest, loss, s.fp32) : kNaN;
  }
  return s;
}

// The mean recovered share of `policy` over the seeds where it is defined, and its mean final loss.
PolicyRecovery policy_recovery(const std::string& policy, ConditionLosses& cond, const stats::BootstrapSpec& spec) {
  std::vector<double> losses;
  PolicyRecovery rec;
  rec.policy = policy;
  for (const auto& s : cond.seeds) {
    if (!s.policy.contains(policy)) {
      continue;
    }
    losses.push_back(s.policy.at(policy));
    const double r = s.recovery.at(policy);
    if (std::isfinite(r)) {
      rec.seeds.push_back(s.seed);
      rec.values.push_back(r);
    }
  }
  cond.final_loss[policy] = stats::bootstrap_mean(losses, spec);
  rec.mean = stats::bootstrap_mean(rec.values, spec);
  if (!rec.mean) {
    rec.note = "defined for " + std::to_string(rec.values.size()) + " seed(s); an interval needs at least 2";
  }
  return rec;
}

// Recovery of `num` over recovery of `den`, paired by seed (seeds where both are defined and den's is nonzero).
PolicyContrast contrast(const PolicyRecovery& num, const PolicyRecovery& den, const stats::BootstrapSpec& spec) {
  PolicyContrast pc;
  pc.numerator = num.policy;
  pc.denominator = den.policy;
  std::vector<std::string> units;
  std::vector<double> a;
  std::vector<double> b;
  for (std::size_t k = 0; k < num.seeds.size(); ++k) {
    const auto it = std::find(den.seeds.begin(), den.seeds.end(), num.seeds[k]);
    if (it == den.seeds.end()) {
      continue;
    }
    const double d = den.values[static_cast<std::size_t>(it - den.seeds.begin())];
    if (d == 0.0) {
      continue;
    }
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
  return pc;
}

// Contrasts: every other non-nearest policy's recovery over full SR's ("stochastic") when it is present; otherwise,
// with exactly two policies, the second over the first (alphabetical).
std::vector<PolicyContrast> contrasts(const ConditionLosses& cond, const stats::BootstrapSpec& spec) {
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  const auto& rec = cond.recoveries;
  const auto full_sr =
      std::find_if(rec.begin(), rec.end(), [](const PolicyRecovery& r) { return r.policy == "stochastic"; });
  if (full_sr != rec.end()) {
    const auto j = static_cast<std::size_t>(full_sr - rec.begin());
    for (std::size_t i = 0; i < rec.size(); ++i) {
      if (i != j) {
        pairs.push_back({i, j});
      }
    }
  } else if (rec.size() == 2) {
    pairs.push_back({1, 0});
  }
  std::vector<PolicyContrast> out;
  out.reserve(pairs.size());
  for (const auto& [i, j] : pairs) {
    out.push_back(contrast(rec[i], rec[j], spec));
  }
  return out;
}

// One condition: every seed's losses, the means over seeds, each policy's recovery and the contrasts.
std::optional<ConditionLosses> condition_losses(const std::string& name, const std::map<std::string, SeedRuns>& runs,
                                                const stats::BootstrapSpec& spec, std::vector<std::string>& left_out) {
  ConditionLosses cond;
  cond.condition = name;
  std::vector<std::string> seeds;
  seeds.reserve(runs.size());
  for (const auto& [seed, r] : runs) {
    seeds.push_back(seed);
  }
  std::sort(seeds.begin(), seeds.end(), seed_less);
  std::set<std::string> policy_names;
  for (const auto& seed : seeds) {
    auto s = seed_losses(name, seed, runs.at(seed), left_out);
    if (!s) {
      continue;
    }
    for (const auto& [policy, loss] : s->policy) {
      policy_names.insert(policy);
    }
    if (!(s->gap > 0) && !s->policy.empty()) {
      cond.undefined.push_back("seed " + seed + ": nearest is not worse than fp32 (gap " +
                               util::fixed_number(s->gap, 5) + " nats), so the recovered share is undefined");
    }
    cond.seeds.push_back(std::move(*s));
  }
  if (cond.seeds.empty()) {
    return std::nullopt;
  }
  std::vector<double> gaps;
  std::vector<double> fp32;
  std::vector<double> nearest;
  for (const auto& s : cond.seeds) {
    gaps.push_back(s.gap);
    fp32.push_back(s.fp32);
    nearest.push_back(s.nearest);
  }
  cond.gap = stats::bootstrap_mean(gaps, spec);
  cond.final_loss["fp32"] = stats::bootstrap_mean(fp32, spec);
  cond.final_loss["nearest"] = stats::bootstrap_mean(nearest, spec);
  for (const auto& policy : policy_names) {
    cond.recoveries.push_back(policy_recovery(policy, cond, spec));
  }
  cond.contrasts = contrasts(cond, spec);
  return cond;
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
    if (why) {
      *why = reason;
    }
    return std::nullopt;
  };
  if (trace.validation_loss.empty()) {
    return fail("no validation loss in the trace (set [validation] every)");
  }
  if (trace.validation_steps.back() != trace.steps) {
    return fail("the last validation is at step " + std::to_string(trace.validation_steps.back()) + ", not after the " +
                std::to_string(trace.steps) + " steps of the run");
  }
  const double loss = trace.validation_loss.back();
  if (!std::isfinite(loss)) {
    return fail("the final validation loss is not finite");
  }
  return loss;
}

LossStudy analyze_losses(const std::vector<LossCell>& cells, const stats::BootstrapSpec& spec) {
  LossStudy study;
  study.bootstrap = spec;
  const LossGrid grid = sort_runs(cells, study);
  for (const auto& name : grid.conditions) {
    if (auto cond = condition_losses(name, grid.runs.at(name), spec, study.left_out)) {
      study.conditions.push_back(std::move(*cond));
    }
  }
  return study;
}

std::vector<LossCell> loss_cells(const SweepStore& store, const SweepSpec& spec, TraceCache& cache) {
  std::map<std::string, const SweepCell*> spec_cells;
  for (const auto& c : spec.cells) {
    spec_cells[c.name] = &c;
  }
  std::vector<LossCell> out;
  for (const auto& stored : store.cells()) {
    LossCell cell;
    cell.name = stored.name;
    cell.reference = stored.role == "reference";
    cell.reference_of = stored.reference;
    cell.trace = cache.trace(stored.id);
    cell.problem = cache.problem(stored.id);
    const auto sc = spec_cells.find(stored.name);
    const nlohmann::json params = sc != spec_cells.end() ? sc->second->params : nlohmann::json::object();
    std::string condition;
    for (const auto& [k, v] : params.items()) {
      if (k == "target.policy" || k == "target.sr_bits" || k == "target.sr_stream" || k == "seed") {
        continue;
      }
      condition += (condition.empty() ? "" : ", ") + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
    }
    cell.condition = condition;
    if (params.contains("seed")) {
      cell.seed = params["seed"].is_string() ? params["seed"].get<std::string>() : params["seed"].dump();
    } else if (stored.config.contains("seed")) {
      cell.seed = stored.config["seed"].dump();
    }
    if (cell.reference) {
      cell.policy = "fp32";
    } else {
      const auto& target = stored.config.value("target", nlohmann::json::object());
      const std::string policy = target.value("policy", std::string("nearest"));
      const int bits = target.value("sr_bits", 0);
      try {
        cell.policy = sim::projection_name(sim::make_policy(policy, bits));
      } catch (const std::exception&) {
        cell.policy = policy;
      }
      const std::string stream = target.value("sr_stream", std::string("philox"));
      if (stream != "philox") {  // the same policy from another random stream is its own row
        cell.policy += " (" + stream + ")";
      }
    }
    out.push_back(std::move(cell));
  }
  return out;
}

}  // namespace wbaudit::runners
