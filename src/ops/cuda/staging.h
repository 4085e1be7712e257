/* staging.h — C entry points of the GPU staging of training examples: pinned host memory
 * for the loader's ring slots (data/loader.h) and the asynchronous copy of one example to
 * a device buffer on a stream of its own, with events the training stream waits on.
 *
 * Flow per step (the training loop):
 *   mf_loader_next(L, &ex);                              host slot ready (pinned)
 *   mf_staging_copy(s, ex.data, bytes, &buf);            H2D on the staging stream; buf.dev
 *   mf_staging_wait(s, &buf, train_stream);              training stream waits for the copy
 *   ... kernels of the step read buf.dev on train_stream ...
 *   mf_staging_done(s, &buf, train_stream);              buffer reusable after those kernels
 *   mf_staging_host_sync(s, &buf); mf_loader_release(L, &ex);   slot back once copied
 * With 2 or more device buffers the copy of step t+1 overlaps the kernels of step t; a
 * buffer is overwritten only after the training stream passed its mf_staging_done (the
 * staging stream waits on that event on the GPU, the host never blocks there).
 * Streams are passed as void * (a cudaStream_t; NULL = the legacy default stream) so this
 * header compiles without the CUDA headers. Only linked in CUDA builds (libmegafold_cuda.a).
 * Not here: producing the examples (data/loader.h), the layout of a slot (data/crop.h). */
#ifndef MF_CUDA_STAGING_H
#define MF_CUDA_STAGING_H

#include <stddef.h>

#include "../../core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pinned (page-locked, portable) host memory, in the shape of mf_loader_host_alloc:
 * cfg.host = (mf_loader_host_alloc){mf_staging_host_alloc, mf_staging_host_free, NULL}.
 * NULL with mf_error_message() set when cudaHostAlloc fails. */
void *mf_staging_host_alloc(void *ctx, size_t bytes);
void mf_staging_host_free(void *ctx, void *p);

typedef struct mf_staging mf_staging;

/* One device buffer holding a copied example. */
typedef struct {
  void *dev;      /* bytes of device memory; valid until mf_staging_destroy */
  size_t bytes;   /* bytes copied into it */
  int index;      /* which buffer of the staging (0..n_buffers-1) */
  unsigned long long seq; /* copy number (0, 1, 2, ...) */
} mf_staging_buffer;

/* n_buffers (>= 1) device buffers of `bytes` each, a non-blocking stream and events, on
 * the current device (mf_cuda_init first: device memory comes from mf_dmalloc). Errors:
 * MF_ERR_CONFIG (0 bytes or buffers), MF_ERR_NOMEM (device memory), MF_ERR_RUNTIME. */
mf_status mf_staging_create(size_t bytes, int n_buffers, mf_staging **out);
/* Waits for every copy, frees buffers, stream and events. NULL is fine. */
void mf_staging_destroy(mf_staging *s);

/* Enqueues the copy of `bytes` (<= the buffer size) from `host` (pinned, from
 * mf_staging_host_alloc, for a truly asynchronous copy) into the next buffer (round robin),
 * after the training stream released that buffer; records its ready event. */
mf_status mf_staging_copy(mf_staging *s, const void *host, size_t bytes, mf_staging_buffer *out);
/* Makes `stream` wait (on the GPU) until buf's copy is complete. */
mf_status mf_staging_wait(mf_staging *s, const mf_staging_buffer *buf, void *stream);
/* Marks buf free for a later copy once the work enqueued on `stream` so far is done. */
mf_status mf_staging_done(mf_staging *s, const mf_staging_buffer *buf, void *stream);
/* Blocks the host until buf's copy finished: its host memory may then be reused. */
mf_status mf_staging_host_sync(mf_staging *s, const mf_staging_buffer *buf);
/* The staging stream (a cudaStream_t), for tests and profiling. */
void *mf_staging_stream(mf_staging *s);

#ifdef __cplusplus
}
#endif

#endif
