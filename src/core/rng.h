/* rng.h — the counter-based random numbers of megafold (Philox-4x32-10).
 * Every random draw is keyed by (seed, stream, index); streams are derived from
 * (step, purpose, sub) so that a run is reproducible from its seed and any element
 * can be drawn on the CPU or the GPU independently. See philox.h for the transforms. */
#ifndef MF_RNG_H
#define MF_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the numbers are for: part of the stream id, so purposes never collide. */
typedef enum {
  MF_RNG_INIT = 1,   /* parameter initialisation; sub = block index (Pairformer), 4000+ for
                        other modules (cli/demo.c uses 4000) */
  MF_RNG_DROPOUT,    /* dropout masks; sub = layer index */
  MF_RNG_CROP,       /* cropping */
  MF_RNG_MSA,        /* MSA row subsampling */
  MF_RNG_AUGMENT,    /* rotations / translations */
  MF_RNG_NOISE,      /* diffusion noise levels and noise */
  MF_RNG_RECYCLE,    /* number of recycles */
  MF_RNG_TEST        /* tests and benchmarks */
} mf_rng_purpose;

/* Raw Philox-4x32-10 block. */
void mf_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* Stream id of (step, purpose, sub): step in the high 40 bits, purpose (< 4096) and
 * sub (< 4096) below; distinct triples give distinct streams. */
uint64_t mf_rng_stream(uint64_t step, uint32_t purpose, uint32_t sub);

float mf_rng_uniform(uint64_t seed, uint64_t stream, uint64_t i);   /* (0, 1) */
float mf_rng_normal(uint64_t seed, uint64_t stream, uint64_t i);    /* N(0, 1) */
float mf_rng_trunc_normal(uint64_t seed, uint64_t stream, uint64_t i, double lo, double hi);

/* out[k] = draw(offset + k) for k < n. */
void mf_rng_fill_uniform(float *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset);
void mf_rng_fill_normal(float *out, int64_t n, uint64_t seed, uint64_t stream, uint64_t offset);
/* Truncated normal on [lo, hi] times scale (the lecun/He initialisers). */
void mf_rng_fill_trunc_normal(float *out, int64_t n, uint64_t seed, uint64_t stream,
                              uint64_t offset, double lo, double hi, double scale);

#ifdef __cplusplus
}
#endif

#endif
