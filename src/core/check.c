/* check.c — the fatal path (with an interceptable handler), assertion failures and
 * the per-thread recoverable error message. See check.h. */
#include "check.h"
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mf_fatal_handler g_handler = NULL;
static void *g_handler_ud = NULL;

static _Thread_local char t_err_msg[1024];
static _Thread_local char t_errno_buf[128];

mf_fatal_handler mf_set_fatal_handler(mf_fatal_handler h, void *userdata) {
  mf_fatal_handler old = g_handler;
  g_handler = h;
  g_handler_ud = userdata;
  return old;
}

static MF_NORETURN void fatal_v(const char *file, int line, const char *prefix, const char *fmt,
                              va_list ap) {
  char body[1024], msg[1400];
  vsnprintf(body, sizeof body, fmt, ap);
  int rank = mf_log_get_rank();
  if (rank >= 0)
    snprintf(msg, sizeof msg, "[rank %d] %s:%d: %s%s", rank, file, line, prefix, body);
  else
    snprintf(msg, sizeof msg, "%s:%d: %s%s", file, line, prefix, body);
  if (g_handler) {
    g_handler(msg, g_handler_ud);
    /* a handler must not return */
  }
  fprintf(stderr, "megafold fatal: %s\n", msg);
  fflush(stderr);
  abort();
}

void mf_fatal_at(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fatal_v(file, line, "", fmt, ap);
}

void mf_assert_fail(const char *file, int line, const char *expr, const char *fmt, ...) {
  char prefix[512];
  snprintf(prefix, sizeof prefix, "assertion failed: %s%s", expr, fmt[0] ? ": " : "");
  va_list ap;
  va_start(ap, fmt);
  fatal_v(file, line, prefix, fmt, ap);
}

mf_status mf_error_set(mf_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t_err_msg, sizeof t_err_msg, fmt, ap);
  va_end(ap);
  return st;
}

const char *mf_error_message(void) { return t_err_msg; }

void mf_error_clear(void) { t_err_msg[0] = '\0'; }

const char *mf_status_name(mf_status st) {
  switch (st) {
    case MF_OK: return "ok";
    case MF_ERR_IO: return "I/O error";
    case MF_ERR_FORMAT: return "format error";
    case MF_ERR_SHAPE: return "shape error";
    case MF_ERR_CONFIG: return "configuration error";
    case MF_ERR_NOMEM: return "out of memory";
    case MF_ERR_RUNTIME: return "runtime error";
  }
  return "unknown error";
}

const char *mf_errno_string(void) {
  int e = errno;
  /* strerror_r has two incompatible variants; strerror under a copy is enough here */
  snprintf(t_errno_buf, sizeof t_errno_buf, "%s (errno %d)", strerror(e), e);
  return t_errno_buf;
}
