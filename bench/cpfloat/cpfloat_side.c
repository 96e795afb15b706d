/* The CPFloat side of the comparison (see cpfloat_side.h). Compiled by bench/cpfloat/CMakeLists.txt with
 * -O3 -march=native -std=gnu99 -fopenmp and, when pcg-c is given, -include pcg_variants.h (CPFloat's
 * recommended generator). */
#include "cpfloat_side.h"

#include <stdio.h>
#include <stdlib.h>

#include "cpfloat_binary32.h"

struct cpf_side {
  optstruct* opts;
  float buffer[CPF_SIDE_BUFFER];
};

int cpf_side_uses_pcg(void) {
#ifdef PCG_VARIANTS_H_INCLUDED
  return 1;
#else
  return 0;
#endif
}

cpf_side* cpf_side_create(int precision, int emin, int emax, int stochastic, uint64_t seed) {
  cpf_side* side = (cpf_side*)malloc(sizeof(cpf_side));
  if (side == NULL) {
    return NULL;
  }
  side->opts = init_optstruct();
  optstruct* o = side->opts;
  o->precision = precision;
  o->emin = emin;
  o->emax = emax;
  o->explim = CPFLOAT_EXPRANGE_TARG;
  o->infinity = CPFLOAT_INF_NO;
  o->saturation = CPFLOAT_SAT_USE;
  o->subnormal = CPFLOAT_SUBN_USE;
  o->round = stochastic ? CPFLOAT_RND_SP : CPFLOAT_RND_NE;
  o->flip = CPFLOAT_SOFTERR_NO;
  o->p = 0;
  /* CPFloat's validator: 0 valid, < 0 a warning, > 0 an error. It requires emin < 0 (code 3), which excludes
   * e2m1 (emin 0); its rounding routines handle emin = 0 all the same (the comparison's nearest erased counts
   * equal wbaudit's exactly), so that case runs, with a note. */
  const int status = cpfloat_validate_optstructf(o);
  static int noted_emin = 0;
  if (status == 3 && emin == 0 && emax > 0) {
    if (!noted_emin) {
      fprintf(stderr, "cpfloat_side: CPFloat's validator refuses emin = 0 (e2m1); running it anyway\n");
      noted_emin = 1;
    }
  } else if (status > 0) {
    fprintf(stderr, "cpfloat_side: cpfloat_validate_optstructf returned error %d (precision %d, emin %d, emax %d)\n",
            status, precision, emin, emax);
    cpf_side_destroy(side);
    return NULL;
  } else if (status < 0) {
    fprintf(stderr, "cpfloat_side: cpfloat_validate_optstructf returned warning %d (precision %d, emin %d, emax %d)\n",
            status, precision, emin, emax);
  }
#ifdef PCG_VARIANTS_H_INCLUDED
  /* A fixed seed instead of CPFloat's clock-seeded one (same statistics, repeatable runs). */
  o->randseedf = (cpfloat_randseedf_t*)malloc(sizeof(cpfloat_randseedf_t));
  pcg32_srandom_r(o->randseedf, seed, 0x5851f42d4c957f2dull);
#else
  (void)seed;
#endif
  return side;
}

void cpf_side_destroy(cpf_side* side) {
  if (side != NULL) {
    free_optstruct(side->opts);
    free(side);
  }
}

void cpf_side_round_add(cpf_side* side, float* w, const float* u, int64_t n, int64_t* nonzero, int64_t* erased) {
  int64_t nz = 0, er = 0;
  for (int64_t first = 0; first < n; first += CPF_SIDE_BUFFER) {
    const int64_t len = n - first < CPF_SIDE_BUFFER ? n - first : CPF_SIDE_BUFFER;
    float* wb = w + first;
    const float* ub = u + first;
    cpf_addf(side->buffer, wb, ub, (size_t)len, side->opts);
    for (int64_t i = 0; i < len; ++i) {
      const int moved = ub[i] != 0.0f;
      nz += moved;
      er += moved & (side->buffer[i] == wb[i]);
      wb[i] = side->buffer[i];
    }
  }
  *nonzero = nz;
  *erased = er;
}
