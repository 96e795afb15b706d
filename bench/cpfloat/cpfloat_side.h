/* The CPFloat side of the comparison (bench/cpfloat_compare.sh): a C interface to CPFloat's cpf_addf, compiled as
 * C with CPFloat's headers (it is not part of wbaudit's build). */
#ifndef WBAUDIT_BENCH_CPFLOAT_SIDE_H
#define WBAUDIT_BENCH_CPFLOAT_SIDE_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cpf_side cpf_side;

/* A target format (precision = significand bits including the implicit one, emin, emax; subnormals on, values
 * beyond max finite saturate) and rounding: stochastic = 0 round to nearest, ties to even; 1 stochastic rounding
 * with proportional probabilities. seed seeds CPFloat's generator where it uses pcg-c (otherwise CPFloat seeds its
 * fallback generator from the clock). Returns NULL (and prints why) when CPFloat refuses the options. */
cpf_side* cpf_side_create(int precision, int emin, int emax, int stochastic, uint64_t seed);
void cpf_side_destroy(cpf_side* side);

/* w[i] <- round(w[i] + u[i]) for i < n, through cpf_addf into a buffer of CPF_SIDE_BUFFER elements (in cache),
 * counting *nonzero (u[i] != 0) and *erased (u[i] != 0 and the rounded sum == w[i]) before copying back. */
enum { CPF_SIDE_BUFFER = 4096 };
void cpf_side_round_add(cpf_side* side, float* w, const float* u, int64_t n, int64_t* nonzero, int64_t* erased);

/* Whether CPFloat was compiled with pcg-c's generator (pcg_variants.h included). */
int cpf_side_uses_pcg(void);

#ifdef __cplusplus
}
#endif
#endif
