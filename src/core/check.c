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

/* Prefixes rank, file and line, then hands the message to the handler or aborts. */
static MF_NORETURN void fatal_msg(const char *file, int line, const char *body) {
  char msg[1600];
  int rank = mf_log_get_rank();
  if (rank >= 0)
    snprintf(msg, sizeof msg, "[rank %d] %s:%d: %s", rank, file, line, body);
  else
    snprintf(msg, sizeof msg, "%s:%d: %s", file, line, body);
  if (g_handler) g_handler(msg, g_handler_ud); /* a handler must not return */
  fprintf(stderr, "megafold fatal: %s\n", msg);
  fflush(stderr);
  abort();
}

void mf_fatal_at(const char *file, int line, const char *fmt, ...) {
  char body[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  fatal_msg(file, line, body);
}

void mf_assert_fail(const char *file, int line, const char *expr, const char *fmt, ...) {
  char detail[768], body[1400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  snprintf(body, sizeof body, "assertion failed: %s%s%s", expr, detail[0] ? ": " : "", detail);
  fatal_msg(file, line, body);
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
