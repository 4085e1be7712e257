/* cpu_math.h — small scalar helpers shared by the CPU reference ops (double precision).
 * Header-only, static inline; not part of the public API. */
#ifndef MF_OPS_CPU_MATH_H
#define MF_OPS_CPU_MATH_H

#include <math.h>

static inline double mf_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

#endif
