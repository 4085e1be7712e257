/* megafold.h — the public C API of megafold and the guide to its source tree.
 *
 * megafold trains AlphaFold3-style structure models in C11 with CUDA kernels.
 * This header is what a program links against; internal headers live beside
 * their sources in src/.
 *
 * Source tree (each layer calls only the ones below it):
 *   src/core/      errors and checks, allocation, tensor descriptor, Philox RNG, logging, timers
 *   src/ops/       one header per op family (src/ops/<family>.h) with the gradient contract;
 *                  src/ops/cpu/<family>.c is the reference, src/ops/cuda/<family>.cu the GPU path
 *   src/model/     AF3 modules composed from ops: the Pairformer block and checkpointed stack,
 *                  the parameter table, parity bundles; src/model/cuda/ the same on one GPU
 *                  (bf16 compute copy of fp32 master weights, one activation arena)
 *   src/train/     checkpoints          src/data/   readers, featuriser, cache, loader
 *   src/cli/       the megafold command
 *   tools/reference/  the PyTorch reference of the Pairformer (parity with CPU and GPU)
 *
 * Dimension letters, used in every shape comment:
 *   B   batch (structures)           N   tokens            Na  atoms
 *   S   MSA rows                     R   attention "rows" sharing one bias (N, S or 1)
 *   H   heads                        D   head dim          Q/K query/key length
 *   Cs  single channels (384)        Cz  pair channels (128)
 *   Cm  MSA channels (64)            Ch  hidden channels of a layer
 *   M   rows of a flattened activation (e.g. N*N for the pair tensor)
 *
 * Layout: row-major, channel last, as the PyTorch reference:
 *   pair (N, N, Cz), single (N, Cs), MSA (S, N, Cm), atoms (Na, C).
 *
 * Op contract (every mf_<op>_forward / mf_<op>_backward pair):
 *   - argument order: outputs, then saved statistics, then inputs, weights, dims;
 *     backward: input gradients, parameter gradients, then dout, saved statistics,
 *     inputs, weights, dims;
 *   - parameter gradients ACCUMULATE (+=); activation gradients ASSIGN (=) unless
 *     the header of the op says it accumulates (residual fan-in);
 *   - the CPU reference is written over mf_real, float by default and double when
 *     built with -DMF_REAL_DOUBLE (used by gradient checks and as the GPU tests' oracle).
 */
#ifndef MEGAFOLD_H
#define MEGAFOLD_H

#define MF_VERSION_MAJOR 0
#define MF_VERSION_MINOR 1
#define MF_VERSION_PATCH 0
#define MF_VERSION_STRING "0.1.0"

#include "../src/core/core.h"

#endif /* MEGAFOLD_H */
