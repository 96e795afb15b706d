#pragma once
// The loss studies of a sweep, as analysis (docs/studies.md): study 2 (matched decoder: fp32 vs nearest vs stochastic
// write-back), study 5 (policy contrast: full SR vs dead-zone SR) and study 6 (checkpoint replay under simulated
// INT3), computed from the validation losses in the traces. The result (report::LossStudy) is rendered by
// runners/report/loss_report.hpp; the definitions are stated there.
#include <optional>
#include <string>
#include <vector>

#include "runners/evaluate/sweep_cells.hpp"
#include "runners/report/loss_report.hpp"
#include "runners/spec/sweep_spec.hpp"
#include "runners/store/store.hpp"
#include "sim/trace/trace.hpp"
#include "stats/bootstrap.hpp"

namespace wbaudit::runners {

// The bootstrap of every interval of the loss studies: percentile (BCa is unstable at 3 seeds), 2000 resamples.
stats::BootstrapSpec loss_bootstrap_spec();

// The final validation loss of a trace: the last entry, which must be measured after the last step.
// nullopt with `why` set otherwise.
std::optional<double> final_validation_loss(const sim::Trace& trace, std::string* why = nullptr);

// The runs of a sweep as the loss studies see them: condition = the grid values except the policy, its SR bits,
// its random stream and the seed; policy = the write-back policy's projection name ("fp32" for references).
std::vector<report::LossCell> loss_cells(const SweepStore& store, const SweepSpec& spec, TraceCache& cache);

// Pure: the numbers of the studies from the cells (throws nothing for bad cells: they are listed in left_out).
report::LossStudy analyze_losses(const std::vector<report::LossCell>& cells,
                                 const stats::BootstrapSpec& spec = loss_bootstrap_spec());

}  // namespace wbaudit::runners
