#pragma once
// Projections read from a reference trace: the `source` predictor (the predeclared fp32 reference) and the
// `matched-reference` comparison (a reference matched to the target's own seed and data order; privileged) are the
// same series, GroupTrace::projected[format].fraction, taken from different traces.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/trace/trace.hpp"

namespace wbaudit::forecast {

struct Series {
  std::vector<std::int64_t> steps;
  std::vector<double> values;  // NaN = missing (e.g. no nonzero proposal at that step)
};

// The group named `group`; throws ForecastError listing the trace's groups when absent.
const sim::GroupTrace& find_group(const sim::Trace& trace, std::string_view group);

// The projected erased fraction of `group` under `format` on the reference's recorded steps: under nearest
// (projection "nearest": GroupTrace::projected[format].fraction), or the expected erased fraction of a stochastic
// policy (projection "stochastic", "stochastic-r8", "deadzone-sr", ...: projected[format].expected[projection],
// sim::projection_name). Throws ForecastError when the trace is not a reference trace, the group, format or
// projection is absent (listing those present), or the series length differs from the recorded steps.
Series projected_series(const sim::Trace& reference, std::string_view group, std::string_view format,
                        std::string_view projection = "nearest");

// The measured outcome of a target run: GroupTrace::erased_fraction of `group` on the run's recorded steps. Throws
// ForecastError when the trace is not a target trace, the group is absent, or the lengths differ.
Series measured_series(const sim::Trace& target, std::string_view group);

}  // namespace wbaudit::forecast
