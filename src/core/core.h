/* core.h — everything in src/core, in one include: checks and errors, allocation,
 * tensor descriptors, the Philox RNG, logging and timers, the mf_real type.
 * Not a place for op or model code. */
#ifndef MF_CORE_H
#define MF_CORE_H

#include "real.h"
#include "check.h"
#include "alloc.h"
#include "tensor.h"
#include "rng.h"
#include "log.h"

#endif
