#include "forecast/source.hpp"

#include "forecast/error.hpp"

namespace wbaudit::forecast {

const sim::GroupTrace& find_group(const sim::Trace& trace, std::string_view group) {
  std::string known;
  for (const auto& g : trace.groups) {
    if (g.name == group) {
      return g;
    }
    known += (known.empty() ? "" : ", ") + g.name;
  }
  throw ForecastError("trace has no group \"" + std::string(group) + "\" (groups: " + known + ")");
}

Series projected_series(const sim::Trace& reference, std::string_view group, std::string_view format,
                        std::string_view projection) {
  if (reference.mode != "reference") {
    throw ForecastError("projected_series: trace mode is \"" + reference.mode + "\", expected \"reference\"");
  }
  const sim::GroupTrace& g = find_group(reference, group);
  const auto it = g.projected.find(std::string(format));
  if (it == g.projected.end()) {
    std::string known;
    for (const auto& [name, series] : g.projected) {
      known += (known.empty() ? "" : ", ") + name;
    }
    throw ForecastError("projected_series: group \"" + g.name + "\" has no projection for format \"" +
                        std::string(format) + "\" (projected formats: " + known + ")");
  }
  const std::vector<double>* fraction = &it->second.fraction;
  if (projection != "nearest") {
    const auto e = it->second.expected.find(std::string(projection));
    if (e == it->second.expected.end()) {
      std::string known = "nearest";
      for (const auto& [name, series] : it->second.expected) {
        known += ", " + name;
      }
      throw ForecastError("projected_series: group \"" + g.name + "\" format \"" + std::string(format) +
                          "\" has no \"" + std::string(projection) + "\" projection (projections: " + known + ")");
    }
    fraction = &e->second.fraction;
  }
  if (fraction->size() != reference.recorded_steps.size()) {
    throw ForecastError("projected_series: group \"" + g.name + "\" format \"" + std::string(format) +
                        "\" projection \"" + std::string(projection) + "\": " + std::to_string(fraction->size()) +
                        " fractions but " + std::to_string(reference.recorded_steps.size()) + " recorded steps");
  }
  return Series{reference.recorded_steps, *fraction};
}

Series measured_series(const sim::Trace& target, std::string_view group) {
  if (target.mode != "target") {
    throw ForecastError("measured_series: trace mode is \"" + target.mode + "\", expected \"target\"");
  }
  const sim::GroupTrace& g = find_group(target, group);
  if (g.erased_fraction.size() != target.recorded_steps.size()) {
    throw ForecastError("measured_series: group \"" + g.name + "\": " + std::to_string(g.erased_fraction.size()) +
                        " erased fractions but " + std::to_string(target.recorded_steps.size()) + " recorded steps");
  }
  return Series{target.recorded_steps, g.erased_fraction};
}

}  // namespace wbaudit::forecast
