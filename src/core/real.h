/* real.h — the scalar type of the CPU reference ops.
 * float by default; double when compiled with -DMF_REAL_DOUBLE (the gradient-check
 * and GPU-oracle build, libmegafold_f64.a). Accumulations inside the ops use double
 * in both builds. */
#ifndef MF_REAL_H
#define MF_REAL_H

#ifdef MF_REAL_DOUBLE
typedef double mf_real;
#define MF_REAL_NAME "f64"
#else
typedef float mf_real;
#define MF_REAL_NAME "f32"
#endif

#endif
