/* atomic_file.h — writing a whole file atomically: the contents go to a fresh temporary
 * file <path>.tmp.XXXXXX in the same directory (mode 0644), which is flushed, fsync'ed and
 * closed, then renamed over <path>, and the directory is fsync'ed. A reader, or a crash at
 * any point, sees the previous file or the new one whole, never a part. Used by the
 * checkpoints, the parity bundles and the CCD binary. Not a general file API (no appends,
 * no partial updates, no reading); POSIX only. */
#ifndef MF_ATOMIC_FILE_H
#define MF_ATOMIC_FILE_H

#include <stdio.h>

#include "check.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the whole contents to f (an open "wb" stream). Returns nonzero on success, 0 on a
 * failed write with errno describing it (it is reported as "writing <tmp> failed"). */
typedef int (*mf_atomic_write_fn)(FILE *f, void *ctx);

/* Optional hook for crash tests: called with stage "before-rename" and the temporary path
 * once the temporary file is complete, synced and closed, just before the rename. */
typedef void (*mf_atomic_hook_fn)(const char *stage, const char *tmp_path, void *userdata);

/* Writes path atomically through writer(f, ctx); hook (may be NULL) as above. On any error
 * before the rename the previous file is untouched and the temporary file removed:
 * MF_ERR_IO with mf_error_message() naming path, the temporary file and the system error,
 * or MF_ERR_NOMEM. After the rename, a failing fsync of the directory is MF_ERR_IO too
 * (the new file is in place but may not survive a crash). */
mf_status mf_atomic_write_file(const char *path, mf_atomic_write_fn writer, void *ctx,
                               mf_atomic_hook_fn hook, void *hook_userdata);

#ifdef __cplusplus
}
#endif

#endif
