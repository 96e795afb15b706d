#pragma once
// The second step of `wbaudit evaluate` (evaluate.cpp): the standing of the analysis and its cohort.
//   standing  preregistered (a verified registration made before the outcomes), retrospective (registered so, or a
//             recorded deviation touches a required cell), or not preregistered (exploratory; also when the
//             registration's signature does not verify), with the reasons;
//   cohort    every target cell of the sweep: canonical or not, required by this analysis or not, named by a
//             deviation (a recovered cell) or not, and what that means for the verdicts.
#include "runners/evaluate/evaluate.hpp"
#include "runners/evaluate/inputs.hpp"

namespace wbaudit::runners::evaluation {

// Sets result.standing, standing_reasons and registration_sha256; resets in.registration when it is not verified
// (an edited or hand-made registration establishes nothing).
void establish_standing(SweepInputs& in, EvaluationResult& result);

// Sets result.cohort, cohort_statements and cohort_verdict (nothing without a sweep).
void describe_cohort(const SweepInputs& in, EvaluationResult& result);

}  // namespace wbaudit::runners::evaluation
