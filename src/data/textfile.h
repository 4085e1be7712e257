/* textfile.h — reads a whole input file into memory, plain or gzip-compressed (detected by
 * the magic bytes 1f 8b, not by the name; multi-member gzip as written by `cat a.gz b.gz`
 * is accepted). Used by the a3m, FASTA, JSON and CCD readers.
 * It is not a streaming reader and does not parse anything: the caller gets bytes.
 * Truncated or corrupt gzip data is an error (MF_ERR_FORMAT naming the file), never a
 * silently shortened text. */
#ifndef MF_DATA_TEXTFILE_H
#define MF_DATA_TEXTFILE_H

#include <stddef.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads `path` whole; decompresses gzip. On success *data is an mf_malloc'd buffer of
 * *len bytes followed by one NUL (not counted), to be freed with mf_free.
 * Errors: MF_ERR_IO (open/read), MF_ERR_FORMAT (corrupt/truncated gzip), MF_ERR_NOMEM. */
mf_status mf_textfile_read(const char *path, char **data, size_t *len);

/* Same for bytes already in memory (`what` names them in messages): gzip is inflated,
 * anything else copied. */
mf_status mf_textfile_from_bytes(const void *bytes, size_t n, const char *what, char **data,
                                 size_t *len);

/* 1 if the first n bytes contain a NUL byte (binary data); *offset gets its position. */
int mf_textfile_find_nul(const char *data, size_t n, size_t *offset);

#ifdef __cplusplus
}
#endif

#endif
