#include "runners/evaluate/standing.hpp"

#include <algorithm>

#include "util/text.hpp"

namespace wbaudit::runners::evaluation {
using util::join;

namespace {

bool contains(const std::vector<std::string>& list, const std::string& name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

// Canonical (done) or not, and why not ("missing", "failed: ...").
bool canonical_state(const SweepStore& store, const StoredCell& c, std::string& reason) {
  auto status = store.cell_status(c.id);
  if (status.state == CellState::done) {
    return true;
  }
  reason = status.state == CellState::pending ? std::string("missing") : to_string(status.state);
  if (!status.reasons.empty()) {
    reason += ": " + status.reasons.front();
  }
  return false;
}

std::vector<CohortRow> cohort_rows(const SweepInputs& in) {
  const auto deviations = read_deviations(in.sweep_dir);
  auto named_by = [&](const StoredCell& c) -> std::string {
    for (const auto& d : deviations) {
      for (const auto& n : d.cells) {
        if (n == c.name || n == c.id) {
          return d.when + " by " + d.who + ": " + d.what;
        }
      }
    }
    return "";
  };
  std::vector<CohortRow> rows;
  for (const auto& c : in.store->cells()) {
    if (c.role != "target") {
      continue;
    }
    CohortRow row;
    row.cell = c.name;
    row.canonical = canonical_state(*in.store, c, row.reason);
    row.in_cohort = contains(in.required, c.name);
    row.deviation = named_by(c);
    row.can_enter = row.canonical && row.in_cohort;
    rows.push_back(row);
  }
  return rows;
}

// Every other registration of the sweep: which cells it requires and whether they are all canonical.
void other_registrations(const SweepInputs& in, std::vector<std::string>& statements) {
  for (const auto& reg : registrations(in.sweep_dir)) {
    if (in.registration && reg.sha256 == in.registration->sha256) {
      continue;
    }
    std::vector<std::string> bad;
    for (const auto& name : reg.outcome_cells) {
      const StoredCell* c = in.store->find_by_name(name);
      std::string reason;
      if (!c || !canonical_state(*in.store, *c, reason)) {
        bad.push_back(name);
      }
    }
    statements.push_back(
        "the " + std::string(reg.retrospective ? "retrospective" : "prospective") + " registration " +
        reg.sha256.substr(0, 12) + " (" + reg.registered + ") requires " + std::to_string(reg.outcome_cells.size()) +
        " cells: " + (bad.empty() ? std::string("complete") : "incomplete, not canonical: " + join(bad)));
  }
}

std::string why_barred(const CohortRow& row) {
  if (row.can_enter) {
    return "can enter the cohort (canonical and required)";
  }
  if (!row.in_cohort && !row.canonical) {
    return "cannot enter the cohort: it is not among its cells, and it is not canonical (" + row.reason + ")";
  }
  if (!row.in_cohort) {
    return "cannot enter the cohort: it is not among its cells";
  }
  return "cannot enter the cohort: it is not canonical (" + row.reason + ")";
}

// Recovered cells (named by a deviation): which can enter this analysis' cohort, and the verdict that follows.
void recovered_cells(const SweepInputs& in, std::size_t incomplete, EvaluationResult& result) {
  std::vector<std::string> barred;
  bool any_deviated = false;
  bool disjoint = true;
  for (const auto& row : result.cohort) {
    if (row.deviation.empty()) {
      continue;
    }
    any_deviated = true;
    disjoint = disjoint && !row.in_cohort;
    result.cohort_statements.push_back("recovered cell " + row.cell + " (deviation " + row.deviation + ") " +
                                       why_barred(row));
    if (!row.can_enter) {
      barred.push_back(row.cell);
    }
  }
  if (!any_deviated) {
    return;
  }
  if (barred.empty()) {
    result.cohort_verdict =
        "the recovered cells enter the cohort (canonical and required); the verdicts follow the gates, labelled " +
        result.standing;
    return;
  }
  result.cohort_verdict =
      "negative: the recovered cell" + std::string(barred.size() > 1 ? "s " : " ") + join(barred) +
      " cannot enter this analysis' cohort" +
      (disjoint && incomplete == 0 ? " (the complete cohort is disjoint from it)" : "") +
      ", so the outcome of the protocol's full design is not recovered: the gates below speak for the " +
      std::to_string(in.required.size()) + " cohort cells only" +
      (incomplete == 0 ? "" : ", and with the cohort incomplete they are inconclusive");
}

}  // namespace

void establish_standing(SweepInputs& in, EvaluationResult& result) {
  auto& registration = in.registration;
  if (registration && !registration->signature_problem.empty()) {
    // An edited or hand-made registration establishes nothing: exploratory, and said why.
    result.standing = "not preregistered (the registration is not verified)";
    result.standing_reasons.push_back("registration " + registration->sha256.substr(0, 12) + ": " +
                                      registration->signature_problem);
    registration.reset();
  }
  if (registration) {
    result.registration_sha256 = registration->sha256;
    result.standing = "preregistered";
    if (registration->retrospective) {
      result.standing = "retrospective";
      result.standing_reasons.push_back("registered with --retrospective on " + registration->registered + " (" +
                                        std::to_string(registration->outcomes_present_at_registration.size()) +
                                        " outcomes already present)");
    }
  } else if (result.standing.empty()) {
    result.standing = "not preregistered (exploratory)";
  }
  for (const auto& d : read_deviations(in.sweep_dir, in.store.get())) {
    if (!d.signature_problem.empty()) {
      result.standing_reasons.push_back("deviation log line " + std::to_string(d.line) + ": " + d.signature_problem);
    }
    bool touches = d.cells.empty();
    for (const auto& c : d.cells) {
      touches = touches || contains(in.required, c);
    }
    if (!touches) {
      continue;
    }
    if (registration) {
      result.standing = "retrospective";
    }
    result.standing_reasons.push_back("deviation " + d.when + " by " + d.who + ": " + d.what + " (why: " + d.why + ")" +
                                      (d.cells.empty() ? "" : "; cells: " + join(d.cells)));
  }
}

void describe_cohort(const SweepInputs& in, EvaluationResult& result) {
  if (!in.store) {
    return;
  }
  result.cohort = cohort_rows(in);
  std::size_t incomplete = 0;
  std::vector<std::string> not_canonical;
  for (const auto& row : result.cohort) {
    if (row.in_cohort && !row.canonical) {
      ++incomplete;
      not_canonical.push_back(row.cell);
    }
  }
  result.cohort_statements.push_back(
      "this analysis' cohort (its " + std::to_string(in.required.size()) + " required cells) is " +
      (incomplete == 0 ? std::string("complete: every one is canonical")
                       : "incomplete: " + std::to_string(incomplete) + " not canonical (" + join(not_canonical) + ")"));
  other_registrations(in, result.cohort_statements);
  recovered_cells(in, incomplete, result);
}

}  // namespace wbaudit::runners::evaluation
