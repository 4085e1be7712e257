/* atomic_file.c — temporary file, write, flush/fsync, rename, directory fsync; cleanup on
 * error. See atomic_file.h. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, fsync, fdopen, fileno, fchmod, O_DIRECTORY */
#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "alloc.h"

static mf_status fsync_dir(const char *path) {
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0 || fsync(fd) != 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    return mf_error_set(MF_ERR_IO, "%s: written, but syncing its directory %s failed: %s", path,
                        dir, strerror(e));
  }
  close(fd);
  return MF_OK;
}

mf_status mf_atomic_write_file(const char *path, mf_atomic_write_fn writer, void *ctx,
                               mf_atomic_hook_fn hook, void *hook_userdata) {
  if (!path || !*path || !writer)
    return mf_error_set(MF_ERR_CONFIG, "atomic file write: a path and a writer are required");
  size_t tlen = strlen(path) + 16;
  char *tmp = mf_malloc(tlen, "temporary file path");
  if (!tmp) return MF_ERR_NOMEM;
  mf_status st = MF_OK;
  FILE *f = NULL;
  int have_tmp = 0;
  snprintf(tmp, tlen, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    st = mf_error_set(MF_ERR_IO, "%s: cannot create the temporary file %s: %s", path, tmp,
                      strerror(errno));
    goto done;
  }
  have_tmp = 1;
  if (fchmod(fd, 0644) != 0 || !(f = fdopen(fd, "wb"))) {
    st = mf_error_set(MF_ERR_IO, "%s: cannot open %s: %s", path, tmp, strerror(errno));
    if (!f) close(fd);
    goto done;
  }
  if (!writer(f, ctx) || fflush(f) != 0 || fsync(fileno(f)) != 0) {
    st = mf_error_set(MF_ERR_IO, "%s: writing %s failed: %s", path, tmp, strerror(errno));
    goto done;
  }
  int rc = fclose(f);
  f = NULL;
  if (rc != 0) {
    st = mf_error_set(MF_ERR_IO, "%s: closing %s failed: %s", path, tmp, strerror(errno));
    goto done;
  }
  if (hook) hook("before-rename", tmp, hook_userdata);
  if (rename(tmp, path) != 0) {
    st = mf_error_set(MF_ERR_IO, "%s: renaming %s over it failed: %s", path, tmp, strerror(errno));
    goto done;
  }
  have_tmp = 0;
  st = fsync_dir(path);
done:
  if (f) fclose(f);
  if (have_tmp) unlink(tmp);
  mf_free(tmp);
  return st;
}
