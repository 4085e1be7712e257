/* checkpoint.h — training checkpoints: the flat parameter buffer (fp32 master weights), the
 * AdamW moments m and v, the step, the RNG seed and the config, in one safetensors file laid
 * out by the parameter table (model/params.h). Not the optimiser, not the training loop, and
 * not a general safetensors library (it reads only what it writes: F32 tensors of a table).
 *
 * File (safetensors: 8-byte little-endian header length n; n bytes of UTF-8 JSON beginning
 * with '{' and padded with spaces so the data starts at a multiple of 8; then the data):
 *   "<name>"          F32, the table entry's shape (stacked (L, ...)), the parameters
 *   "optim.m.<name>"  F32, same shape, AdamW first moment   } present when saved with
 *   "optim.v.<name>"  F32, same shape, AdamW second moment  } optimiser state
 *   "__metadata__"    strings: format "megafold", format_version "1", step, seed,
 *                     param_count, optimizer ("1"/"0"), config (a JSON object as a string:
 *                     {"pairformer": {"L", "c_s", "c_z", "c_mul", "h_tri", "d_tri", "h_s",
 *                     "d_s", "n_trans", "p_drop"}})
 * The data section is the three flat buffers back to back (params, m, v), each in table
 * order, so a tensor's data_offsets are 4·[offset, offset + numel) plus 4·total per buffer
 * before it. The Python `safetensors` package (and tools/reference) reads it as is.
 *
 * Precision: the file is F32. In the float build (the trainer) this is the buffer, bit for
 * bit. In the double build (gradient checks) values are rounded to float on save.
 *
 * Saving is atomic: a temporary file in the same directory (<path>.tmp.XXXXXX) is written,
 * flushed and fsync'ed, renamed over <path>, and the directory is fsync'ed. A crash at any
 * point leaves either the previous checkpoint or the new one, never a mix; a crash before
 * the rename may leave a stale temporary file, which loading ignores.
 *
 * Loading verifies before writing any caller buffer: the header length against the file,
 * the JSON, every entry's dtype/shape/data_offsets (length = numel·dtype size), offsets in
 * range, not overlapping and covering the data exactly (no holes, as safetensors requires),
 * the file length, every table tensor present with dtype F32 and the table's shape, no
 * tensor outside the table, the metadata and the config. Errors are returned (never fatal)
 * with a message naming the file and the tensor or field. */
#ifndef MF_TRAIN_CHECKPOINT_H
#define MF_TRAIN_CHECKPOINT_H

#include <stdint.h>

#include "core/core.h"
#include "model/params.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MF_CKPT_FORMAT_VERSION 1

/* Writes params (t->total) and, when both are given, adam_m and adam_v (t->total each) to
 * path atomically. adam_m and adam_v: both or neither (NULL: a weights-only file).
 * MF_ERR_IO (with the file and the system error) or MF_ERR_NOMEM; the previous file at
 * path is untouched on any error before the rename (a failing fsync of the directory after
 * it is reported, but the new file is already in place). */
mf_status mf_ckpt_save(const char *path, const mf_params_table *t, const mf_real *params,
                       const mf_real *adam_m, const mf_real *adam_v, uint64_t step,
                       uint64_t seed);

/* Reads a checkpoint written for a table with the same config into params (t->total) and,
 * when given, adam_m and adam_v (the file must then hold them); step and seed may be NULL.
 * MF_ERR_IO, MF_ERR_FORMAT (malformed or truncated file, missing tensor), MF_ERR_SHAPE
 * (a tensor of the wrong dtype or shape), MF_ERR_CONFIG (another config) or MF_ERR_NOMEM.
 * Nothing is written to the buffers unless the whole header checks out. */
mf_status mf_ckpt_load(const char *path, const mf_params_table *t, mf_real *params,
                       mf_real *adam_m, mf_real *adam_v, uint64_t *step, uint64_t *seed);

/* Test hook: called by mf_ckpt_save once the temporary file is complete and synced, just
 * before the rename, with stage "before-rename" and the temporary path (a test can _exit()
 * there to simulate a crash). NULL removes it. Not thread-safe; tests only. */
typedef void (*mf_ckpt_hook)(const char *stage, const char *tmp_path, void *userdata);
void mf_ckpt_set_hook(mf_ckpt_hook hook, void *userdata);

#ifdef __cplusplus
}
#endif

#endif
