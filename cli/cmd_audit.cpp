// wbaudit audit TRAJ --format F --policy P [...]: the exact audit of a realized low-precision trajectory.
// Outputs go to a temporary directory that is renamed into place only when everything is written.
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "audit/trajectory.hpp"
#include "audit/trajectory_audit.hpp"
#include "cli/commands.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/storage_format.hpp"
#include "sim/trace/trace.hpp"
#include "util/csv.hpp"
#include "util/files.hpp"

namespace wa = wbaudit::audit;

namespace wbaudit::cli {
namespace {

struct Args {
  std::string trajectory;
  std::optional<std::string> format, policy;
  std::optional<int> sr_bits;
  std::optional<std::string> sr_stream;
  std::vector<std::string> groups;
  std::string out;
  std::int64_t chunk = std::int64_t{1} << 21;
  std::optional<std::uint64_t> seed;
  std::size_t max_listed = 100000;
  std::size_t show = 10;
};

std::string shortest(float v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string fraction_text(std::int64_t erased, std::int64_t nonzero) {
  if (nonzero == 0) {
    return "";
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(erased) / static_cast<double>(nonzero));
  return buf;
}

std::string expected_text(const wa::InconsistentCoordinate& c) {
  return c.expected_low == c.expected_high ? shortest(c.expected_low)
                                           : shortest(c.expected_low) + "|" + shortest(c.expected_high);
}

std::vector<std::pair<std::string, std::vector<std::string>>> parse_groups(const std::vector<std::string>& specs) {
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;
  for (const std::string& spec : specs) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      throw std::invalid_argument("--group \"" + spec + "\": expected NAME=TENSOR[,TENSOR...]");
    }
    std::vector<std::string> tensors;
    std::istringstream in(spec.substr(eq + 1));
    for (std::string t; std::getline(in, t, ',');) {
      if (!t.empty()) {
        tensors.push_back(t);
      }
    }
    groups.emplace_back(spec.substr(0, eq), std::move(tensors));
  }
  return groups;
}

// counts.csv, inconsistent.csv, trace.h5 and audit.json of an audit, into dir.
void write_audit_outputs(const wa::TrajectoryAudit& audit, const std::string& trajectory,
                         const std::filesystem::path& dir) {
  std::ostringstream counts;
  const bool block = sim::is_block_storage_name(audit.format);
  counts << "group,step,nonzero,erased,saturated,applied,inconsistent,nearest_erased,sr_truncated,erased_fraction,"
            "replay_mismatched,chain_breaks"
         << (block ? ",erased_grid,erased_saturation,erased_scale,collateral,flushed,rescaled_up,rescaled_down,blocks"
                   : "")
         << '\n';
  for (std::size_t g = 0; g < audit.groups.size(); ++g) {
    for (std::size_t k = 0; k < audit.steps.size(); ++k) {
      const wa::AuditCounts& c = audit.counts[g][k];
      counts << util::csv_field(audit.groups[g]) << ',' << audit.steps[k] << ',' << c.nonzero << ',' << c.erased << ','
             << c.saturated << ',' << c.applied << ',' << c.inconsistent << ',' << c.nearest_erased << ','
             << c.sr_truncated << ',' << fraction_text(c.erased, c.nonzero) << ',' << c.replay_mismatched << ','
             << c.chain_breaks;
      if (block) {  // the block write-back's causes (audit/block_audit.hpp)
        const sim::BlockWritebackCounts& b = c.block;
        counts << ',' << b.erased_grid << ',' << b.erased_saturation << ',' << b.erased_scale << ',' << b.collateral
               << ',' << b.flushed << ',' << b.rescaled_up << ',' << b.rescaled_down << ',' << b.blocks;
      }
      counts << '\n';
    }
  }
  util::write_atomic(dir / "counts.csv", counts.str(), /*durable=*/false);
  std::ostringstream list;
  list << "tensor,step,index,w,u,w_next,expected,reason\n";
  for (const auto& c : audit.listed) {
    list << util::csv_field(c.tensor) << ',' << c.step << ',' << c.index << ',' << shortest(c.w) << ',' << shortest(c.u)
         << ',' << shortest(c.w_next) << ',' << expected_text(c) << ',' << util::csv_field(c.reason) << '\n';
  }
  util::write_atomic(dir / "inconsistent.csv", list.str(), /*durable=*/false);
  sim::write_trace(dir / "trace.h5", wa::audit_as_trace(audit, trajectory));
  nlohmann::json summary = {{"trajectory", trajectory},
                            {"format", audit.format},
                            {"policy", sim::policy_name(audit.policy.policy)},
                            {"sr_bits", audit.policy.sr_bits},
                            {"steps", audit.steps.size()},
                            {"coordinates", audit.coordinates},
                            {"inconsistent", audit.inconsistent},
                            {"listed", audit.listed.size()},
                            {"consistent", audit.consistent()}};
  if (audit.policy.stream != sim::SrStream::philox) {
    summary["sr_stream"] = sim::sr_stream_name(audit.policy.stream);
  }
  util::write_atomic(dir / "audit.json", summary.dump(2) + "\n", /*durable=*/false);
}

void run_audit(const Args& a) {
  std::unique_ptr<wa::TrajectorySource> source = wa::open_trajectory(a.trajectory);
  wa::TrajectoryAuditOptions options;
  const std::optional<std::string> format = a.format ? a.format : source->format;
  const std::optional<std::string> policy = a.policy ? a.policy : source->policy;
  if (!format) {
    throw std::invalid_argument(a.trajectory + ": no --format given and the trajectory declares none");
  }
  if (!policy) {
    throw std::invalid_argument(a.trajectory + ": no --policy given and the trajectory declares none");
  }
  if (a.format && source->format && *a.format != *source->format) {
    std::cerr << "wbaudit audit: note: auditing as " << *a.format << " although the trajectory declares "
              << *source->format << "\n";
  }
  options.format = *format;
  options.policy = sim::make_policy(*policy, a.sr_bits ? *a.sr_bits : source->sr_bits.value_or(0),
                                    a.sr_stream ? *a.sr_stream : source->sr_stream.value_or("philox"));
  options.chunk = a.chunk;
  options.seed = a.seed ? a.seed : source->seed;
  options.groups = parse_groups(a.groups);
  options.max_listed = a.max_listed;

  // The output directory appears complete or not at all (util::StagedDirectory); it is checked before the audit.
  std::optional<util::StagedDirectory> staged;
  if (!a.out.empty()) {
    staged.emplace(a.out);
  }
  const wa::TrajectoryAudit audit = wa::audit_trajectory(*source, options);
  if (staged) {
    write_audit_outputs(audit, a.trajectory, staged->path());
    staged->commit();
  }

  wa::AuditCounts total;
  const std::size_t n_tensors = source->tensors.size();
  for (std::size_t t = 0; t < n_tensors; ++t) {
    for (const auto& c : audit.counts[t]) {
      total += c;
    }
  }
  std::cout << "wbaudit audit: " << a.trajectory << ": " << audit.format << ", "
            << sim::policy_name(audit.policy.policy)
            << (audit.policy.sr_bits > 0 ? " (" + std::to_string(audit.policy.sr_bits) + "-bit" +
                                               (audit.policy.stream != sim::SrStream::philox
                                                    ? ", " + sim::sr_stream_name(audit.policy.stream)
                                                    : std::string()) +
                                               ")"
                                         : std::string())
            << ": " << n_tensors << " tensors x " << audit.steps.size() << " steps, " << audit.coordinates
            << " coordinate updates\n";
  std::cout << "  nonzero " << total.nonzero << ", erased " << total.erased << " ("
            << (total.nonzero ? fraction_text(total.erased, total.nonzero) : "n/a") << "), saturated "
            << total.saturated << ", applied " << total.applied << ", nearest would erase " << total.nearest_erased;
  if (audit.policy.sr_bits > 0) {
    std::cout << ", r-bit dead zone " << total.sr_truncated;
  }
  std::cout << "\n";
  if (sim::is_block_storage_name(audit.format)) {
    const sim::BlockWritebackCounts& b = total.block;
    std::cout << "  block causes: erased by the grid " << b.erased_grid << ", by saturation " << b.erased_saturation
              << ", by a scale change " << b.erased_scale << "; collateral moves " << b.collateral << " (flushed to 0 "
              << b.flushed << "); blocks rescaled up " << b.rescaled_up << ", down " << b.rescaled_down << "\n";
  }
  const bool sr = audit.policy.policy == sim::Policy::stochastic || audit.policy.policy == sim::Policy::deadzone_sr;
  if (sr) {
    std::cout << "  SR draws: "
              << (options.seed ? "replayed from seed " + std::to_string(*options.seed) + ": " +
                                     std::to_string(total.replay_mismatched) + " replay mismatches"
                               : std::string("not replayed (no --seed, and the trajectory declares none): each "
                                             "w[t+1] checked to be one of its two SR neighbours"))
              << "\n";
  }
  if (audit.chain_checked > 0 || audit.chain_unchecked_steps > 0) {
    std::cout << "  chaining: " << audit.chain_checked << " coordinate-steps of w[t+1] compared with w at step t + 1, "
              << total.chain_breaks << " differ"
              << (audit.chain_unchecked_steps > 0 ? "; " + std::to_string(audit.chain_unchecked_steps) +
                                                        " steps not checked (the next recorded step is not t + 1)"
                                                  : std::string())
              << "\n";
  }
  for (std::size_t g = 0; g < audit.groups.size(); ++g) {
    wa::AuditCounts c;
    for (const auto& x : audit.counts[g]) {
      c += x;
    }
    std::cout << "  " << audit.groups[g] << ": erased " << c.erased << "/" << c.nonzero << ", inconsistent "
              << c.inconsistent << "\n";
  }
  const double mb = static_cast<double>(audit.bytes_read) / 1e6;
  const double seconds = audit.elapsed_seconds;
  char line[256];
  std::snprintf(line, sizeof line, "  read %.1f MB in %.3f s, audited in %.3f s in all (%.1f M coordinates/s)\n", mb,
                audit.read_seconds, seconds,
                seconds > 0 ? static_cast<double>(audit.coordinates) / seconds / 1e6 : 0.0);
  std::cout << line;
  if (audit.consistent()) {
    std::cout << "  consistent: every recorded write-back matches " << sim::policy_name(audit.policy.policy) << "\n";
  } else {
    std::cout << "  INCONSISTENT: " << audit.inconsistent << " coordinate updates (tensor, step, index, w, u, w_next, "
              << "expected: reason)\n";
    for (std::size_t i = 0; i < std::min(a.show, audit.listed.size()); ++i) {
      const auto& c = audit.listed[i];
      std::cout << "    " << c.tensor << ", " << c.step << ", " << c.index << ", " << shortest(c.w) << ", "
                << shortest(c.u) << ", " << shortest(c.w_next) << ", " << expected_text(c) << ": " << c.reason << "\n";
    }
    if (audit.inconsistent > static_cast<std::int64_t>(a.show)) {
      std::cout << "    ... (" << (a.out.empty() ? "--out DIR lists" : "inconsistent.csv lists") << " up to "
                << a.max_listed << ")\n";
    }
  }
  if (!a.out.empty()) {
    std::cout << "  wrote " << a.out << "/{counts.csv, inconsistent.csv, trace.h5, audit.json}\n";
  }
  if (!audit.consistent()) {
    throw ExitStatus{2};
  }
}

}  // namespace

void add_audit_command(CLI::App& app) {
  auto args = std::make_shared<Args>();
  auto* cmd =
      app.add_subcommand("audit", "Exact audit of a realized low-precision trajectory (HDF5 or .npy directory)");
  cmd->add_option("trajectory", args->trajectory,
                  "Trajectory: an HDF5 file (schema wbaudit.trajectory/1) or a directory of .npy files "
                  "(layout: docs/python.md)")
      ->required();
  cmd->add_option("--format", args->format, "Format of the stored weights (default: the trajectory's attribute)");
  cmd->add_option("--policy", args->policy,
                  "Claimed write-back policy: nearest, stochastic, deadzone-sr (default: the trajectory's attribute)");
  cmd->add_option("--sr-bits", args->sr_bits, "0: exact SR; r in 1..32: r-bit SR with its dead zone");
  cmd->add_option("--sr-stream", args->sr_stream,
                  "SR's random stream when replaying with --seed: philox (default) or philox-packed (--sr-bits r in "
                  "1..16: floor(32/r) coordinates per Philox word; 0: two, 16 bits each; default: the trajectory's "
                  "attribute)");
  cmd->add_option("--group", args->groups,
                  "Declared group NAME=TENSOR[,TENSOR...] (repeatable), counted besides "
                  "every tensor");
  cmd->add_option("--out,-o", args->out,
                  "New directory for counts.csv (group x step), inconsistent.csv, trace.h5 (target trace) and "
                  "audit.json");
  cmd->add_option("--chunk", args->chunk, "Coordinates read at a time per tensor row (default 2097152)");
  cmd->add_option("--seed", args->seed,
                  "The run's SR seed (default: the trajectory's attribute): SR draws are replayed from it and a w[t+1] "
                  "that is the other SR neighbour is a replay mismatch (inconsistent, exit 2); without a seed each "
                  "w[t+1] is checked to be one of its two SR neighbours");
  cmd->add_option("--max-listed", args->max_listed,
                  "Inconsistent coordinates kept in inconsistent.csv (default 100000; all are counted)");
  cmd->add_option("--show", args->show, "Inconsistent coordinates printed (default 10)");
  cmd->footer(
      "Checks every recorded write-back exactly: nearest: w[t+1] == q(w[t] + u[t]); stochastic: w[t+1] is one of\n"
      "the two neighbours of w + u (the value itself on the grid; r-bit SR: the toward-zero one in its dead zone);\n"
      "deadzone-sr: nearest unless nearest erases a nonzero u. Stored values not representable in the format are\n"
      "inconsistent. NaN/inf is an error naming tensor, step and coordinate.\n"
      "Block formats (mxfp8_e4m3, mxfp4_e2m1:rceil, nvfp4, ...): each tensor's step is recomputed whole with the\n"
      "block write-back and w[t+1] must equal it; the tensor's shape attribute is required and SR needs the seed;\n"
      "counts.csv adds the causes (erased by grid / saturation / scale, collateral, flushed, rescaled blocks).\n"
      "Memory: the trajectory streams through in chunks; at most 24 bytes x --chunk (48 MiB by default) of data,\n"
      "plus the counts (7 integers per group and step) and the listed coordinates.\n"
      "Exit status: 0 consistent, 2 inconsistent coordinates found, 1 error.\n"
      "Example (examples/trajectory_tiny: one tensor, two e4m3 nearest steps, as .npy files):\n"
      "  wbaudit audit examples/trajectory_tiny --out runs/audit-tiny");
  cmd->callback([args] { run_audit(*args); });
}

namespace {
[[maybe_unused]] const bool registered = register_command(120, add_audit_command);
}  // namespace

}  // namespace wbaudit::cli
