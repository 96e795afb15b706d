#include "forecast/predictor_registry.hpp"

#include "forecast/error.hpp"
#include "util/text.hpp"

namespace wbaudit::forecast {
namespace {

stats::CellTable template_mean_table(const TableInputs& in, std::vector<std::string>& missing_cells) {
  std::vector<TemplateRow> rows;
  for (const auto& c : in.cells) {
    rows.push_back({c.label(), c.run_id, c.template_class});
  }
  TemplateOptions topt;
  topt.out_of_range = in.options.out_of_range;
  topt.missing_class = in.options.missing_class;
  TemplateTable tt = template_table(rows, in.history, in.grid, topt);
  missing_cells = std::move(tt.missing);
  return std::move(tt.table);
}

// matched-reference is built when any cell has one; then every cell must.
bool every_cell_matched(const TableInputs& in) {
  std::size_t matched = 0;
  for (const auto& c : in.cells) {
    matched += c.matched_reference ? 1 : 0;
  }
  if (matched > 0 && matched < in.cells.size()) {
    for (const auto& c : in.cells) {
      if (!c.matched_reference) {
        throw ForecastError("build_evaluation_tables: matched-reference given for " + std::to_string(matched) + " of " +
                            std::to_string(in.cells.size()) + " cells; missing for \"" + c.label() + "\"");
      }
    }
  }
  return matched == in.cells.size();
}

}  // namespace

const std::vector<PredictorInfo>& predictor_registry() {
  static const std::vector<PredictorInfo> registry = {
      {PredictorKind::source, "source", "forecast", false, false, false, &TableOptions::source, false, "#d62728",
       nullptr,
       [](const TableInputs& in, std::vector<std::string>&) {
         return projection_table(PredictorKind::source, in.cells, in.grid, in.options.out_of_range,
                                 in.options.source_method);
       }},
      {PredictorKind::analytic_grid, "analytic-grid", "forecast", false, false, false, &TableOptions::analytic_grid,
       false, "#ff7f0e", nullptr,
       [](const TableInputs& in, std::vector<std::string>&) {
         return projection_table(PredictorKind::analytic_grid, in.cells, in.grid, in.options.out_of_range);
       }},
      {PredictorKind::template_mean, "template", "forecast", false, false, true, &TableOptions::template_mean, false,
       "#2ca02c", nullptr, template_mean_table},
      {PredictorKind::matched_reference, "matched-reference", "privileged", true, false, false, nullptr, true,
       "#9467bd", every_cell_matched,
       [](const TableInputs& in, std::vector<std::string>&) {
         return projection_table(PredictorKind::matched_reference, in.cells, in.grid, in.options.out_of_range);
       }},
      {PredictorKind::common_time, "common-time", "post-outcome", false, true, true, &TableOptions::common_time, false,
       "#7f7f7f", nullptr,
       [](const TableInputs& in, std::vector<std::string>&) { return common_time_table(in.outcome); }},
  };
  return registry;
}

const PredictorInfo* find_predictor(std::string_view name) {
  for (const auto& p : predictor_registry()) {
    if (p.name == name) {
      return &p;
    }
  }
  return nullptr;
}

const PredictorInfo& predictor_info(std::string_view name) {
  if (const PredictorInfo* p = find_predictor(name)) {
    return *p;
  }
  std::string known;
  for (const auto& n : predictor_names()) {
    known += (known.empty() ? "" : ", ") + n;
  }
  throw ForecastError("unknown predictor \"" + std::string(name) + "\"" + util::did_you_mean(name, predictor_names()) +
                      " (known: " + known + ")");
}

const PredictorInfo& predictor_info(PredictorKind kind) {
  for (const auto& p : predictor_registry()) {
    if (p.kind == kind) {
      return p;
    }
  }
  throw ForecastError("predictor kind " + std::to_string(static_cast<int>(kind)) + " is not registered");
}

std::vector<std::string> predictor_names(bool baselines_only) {
  std::vector<std::string> names;
  for (const auto& p : predictor_registry()) {
    if (!baselines_only || p.baseline) {
      names.emplace_back(p.name);
    }
  }
  return names;
}

std::string predictor_colour(std::string_view name) {
  const PredictorInfo* p = find_predictor(name);
  return p != nullptr ? std::string(p->colour) : std::string("#17becf");
}

}  // namespace wbaudit::forecast
