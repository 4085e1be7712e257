/* staging.cu — pinned host slots and the asynchronous host-to-device copy of training
 * examples on a stream of their own, with a ready event per buffer (the training stream
 * waits on it) and a freed event per buffer (the next copy into it waits on it).
 * See staging.h for the flow. Not here: the loader, kernels. */
#include "staging.h"

#include <stdio.h>

#include "gpu.h"

struct mf_staging {
  size_t bytes;
  int n;
  void **dev;           /* (n) device buffers */
  cudaStream_t stream;  /* non-blocking: never serialised with the legacy default stream */
  cudaEvent_t *ready;   /* (n) copy into buffer i complete */
  cudaEvent_t *freed;   /* (n) training work that read buffer i complete */
  int *freed_set;       /* (n) freed[i] was recorded since the last copy into i */
  unsigned long long seq;
};

static mf_status cuda_err(cudaError_t e, const char *what) {
  return mf_error_set(MF_ERR_RUNTIME, "staging: %s: %s", what, cudaGetErrorString(e));
}
#define TRY(expr)                                                                  \
  do {                                                                             \
    cudaError_t e_ = (expr);                                                       \
    if (e_ != cudaSuccess) return cuda_err(e_, #expr);                             \
  } while (0)

extern "C" void *mf_staging_host_alloc(void *ctx, size_t bytes) {
  (void)ctx;
  void *p = NULL;
  cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    cudaGetLastError(); /* not sticky */
    mf_error_set(MF_ERR_NOMEM, "staging: cudaHostAlloc of %zu bytes: %s", bytes,
                 cudaGetErrorString(e));
    return NULL;
  }
  return p;
}

extern "C" void mf_staging_host_free(void *ctx, void *p) {
  (void)ctx;
  if (p) MF_CHECK_CUDA(cudaFreeHost(p));
}

extern "C" void mf_staging_destroy(mf_staging *s) {
  if (!s) return;
  if (s->stream) MF_CHECK_CUDA(cudaStreamSynchronize(s->stream));
  for (int i = 0; i < s->n; i++) {
    if (s->dev && s->dev[i]) mf_dfree(s->dev[i], s->bytes);
    if (s->ready && s->ready[i]) cudaEventDestroy(s->ready[i]);
    if (s->freed && s->freed[i]) cudaEventDestroy(s->freed[i]);
  }
  if (s->stream) cudaStreamDestroy(s->stream);
  mf_free(s->dev), mf_free(s->ready), mf_free(s->freed), mf_free(s->freed_set);
  mf_free(s);
}

extern "C" mf_status mf_staging_create(size_t bytes, int n_buffers, mf_staging **out) {
  *out = NULL;
  if (bytes == 0 || n_buffers < 1 || n_buffers > 64)
    return mf_error_set(MF_ERR_CONFIG, "staging: need bytes > 0 and 1..64 buffers (got %zu, %d)",
                        bytes, n_buffers);
  mf_staging *s = (mf_staging *)mf_calloc(sizeof *s, "staging");
  if (!s) return MF_ERR_NOMEM;
  s->bytes = bytes;
  s->n = n_buffers;
  s->dev = (void **)mf_calloc((size_t)n_buffers * sizeof(void *), "staging buffers");
  s->ready = (cudaEvent_t *)mf_calloc((size_t)n_buffers * sizeof(cudaEvent_t), "staging events");
  s->freed = (cudaEvent_t *)mf_calloc((size_t)n_buffers * sizeof(cudaEvent_t), "staging events");
  s->freed_set = (int *)mf_calloc((size_t)n_buffers * sizeof(int), "staging flags");
  mf_status st = MF_OK;
  if (!s->dev || !s->ready || !s->freed || !s->freed_set) st = MF_ERR_NOMEM;
  cudaError_t e = cudaSuccess;
  if (st == MF_OK) {
    e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) s->stream = NULL, st = cuda_err(e, "cudaStreamCreateWithFlags");
  }
  for (int i = 0; i < n_buffers && st == MF_OK; i++) {
    s->dev[i] = mf_dmalloc(bytes, "staging buffer");
    if (!s->dev[i]) {
      st = mf_error_set(MF_ERR_NOMEM, "staging: device buffer of %zu bytes: %s", bytes,
                        mf_error_message());
      break;
    }
    e = cudaEventCreateWithFlags(&s->ready[i], cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&s->freed[i], cudaEventDisableTiming);
    if (e != cudaSuccess) st = cuda_err(e, "cudaEventCreateWithFlags");
  }
  if (st != MF_OK) {
    mf_staging_destroy(s);
    return st;
  }
  *out = s;
  return MF_OK;
}

extern "C" mf_status mf_staging_copy(mf_staging *s, const void *host, size_t bytes,
                                     mf_staging_buffer *out) {
  if (!s || !host || !out || bytes > s->bytes)
    return mf_error_set(MF_ERR_CONFIG, "staging: copy of %zu bytes into buffers of %zu", bytes,
                        s ? s->bytes : (size_t)0);
  const int i = (int)(s->seq % (unsigned long long)s->n);
  if (s->freed_set[i]) TRY(cudaStreamWaitEvent(s->stream, s->freed[i], 0));
  s->freed_set[i] = 0;
  TRY(cudaMemcpyAsync(s->dev[i], host, bytes, cudaMemcpyHostToDevice, s->stream));
  TRY(cudaEventRecord(s->ready[i], s->stream));
  out->dev = s->dev[i];
  out->bytes = bytes;
  out->index = i;
  out->seq = s->seq++;
  return MF_OK;
}

static mf_status check_buf(const mf_staging *s, const mf_staging_buffer *b) {
  if (!s || !b || b->index < 0 || b->index >= s->n)
    return mf_error_set(MF_ERR_CONFIG, "staging: not a buffer of this staging");
  return MF_OK;
}

extern "C" mf_status mf_staging_wait(mf_staging *s, const mf_staging_buffer *b, void *stream) {
  mf_status st = check_buf(s, b);
  if (st != MF_OK) return st;
  TRY(cudaStreamWaitEvent((cudaStream_t)stream, s->ready[b->index], 0));
  return MF_OK;
}

extern "C" mf_status mf_staging_done(mf_staging *s, const mf_staging_buffer *b, void *stream) {
  mf_status st = check_buf(s, b);
  if (st != MF_OK) return st;
  TRY(cudaEventRecord(s->freed[b->index], (cudaStream_t)stream));
  s->freed_set[b->index] = 1;
  return MF_OK;
}

extern "C" mf_status mf_staging_host_sync(mf_staging *s, const mf_staging_buffer *b) {
  mf_status st = check_buf(s, b);
  if (st != MF_OK) return st;
  TRY(cudaEventSynchronize(s->ready[b->index]));
  return MF_OK;
}

extern "C" void *mf_staging_stream(mf_staging *s) { return s ? (void *)s->stream : NULL; }
