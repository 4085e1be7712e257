/* log.c — logging, timers and progress reporting. See log.h. */
#define _POSIX_C_SOURCE 200809L
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static mf_log_level g_level = MF_LOG_INFO;
static int g_rank = -1;

void mf_log_set_level(mf_log_level level) { g_level = level; }
mf_log_level mf_log_get_level(void) { return g_level; }
void mf_log_set_rank(int rank) { g_rank = rank; }
int mf_log_get_rank(void) { return g_rank; }

int mf_log_level_parse(const char *s) {
  static const char *names[] = {"debug", "info", "warn", "error", "off"};
  for (int i = 0; i < 5; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

void mf_log(mf_log_level level, const char *fmt, ...) {
  if (level < g_level) return;
  static const char *tags[] = {"debug", "info", "warn", "error", ""};
  char line[2048];
  int n = 0;
  if (g_rank >= 0) n = snprintf(line, sizeof line, "[rank %d] ", g_rank);
  if (level != MF_LOG_INFO) n += snprintf(line + n, sizeof line - (size_t)n, "%s: ", tags[level]);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s\n", line);
}

double mf_time_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mf_timer_start(mf_timer *t) { t->start = mf_time_now(); }

double mf_timer_stop(mf_timer *t) {
  double dt = mf_time_now() - t->start;
  t->total += dt;
  t->count++;
  return dt;
}

void mf_progress_init(mf_progress *p, const char *what, int64_t total) {
  p->what = what;
  p->total = total;
  p->done = 0;
  p->t0 = p->last_print = mf_time_now();
  p->interval = 2.0;
}

static void fmt_eta(char *buf, size_t n, double s) {
  if (s < 0 || s > 1e8) snprintf(buf, n, "?");
  else if (s < 120) snprintf(buf, n, "%.0fs", s);
  else if (s < 7200) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
  else snprintf(buf, n, "%.1fh", s / 3600);
}

void mf_progress_add(mf_progress *p, int64_t n) {
  p->done += n;
  double now = mf_time_now();
  if (now - p->last_print < p->interval && p->done < p->total) return;
  p->last_print = now;
  double el = now - p->t0, rate = el > 0 ? (double)p->done / el : 0;
  char eta[32];
  fmt_eta(eta, sizeof eta, rate > 0 ? (double)(p->total - p->done) / rate : -1);
  MF_INFO("%s: %lld/%lld (%.1f%%), %.2f items/s, ETA %s", p->what, (long long)p->done,
          (long long)p->total, p->total ? 100.0 * (double)p->done / (double)p->total : 100.0,
          rate, eta);
}

void mf_progress_finish(mf_progress *p) {
  double el = mf_time_now() - p->t0;
  MF_INFO("%s: %lld items in %.2fs (%.2f items/s)", p->what, (long long)p->done, el,
          el > 0 ? (double)p->done / el : 0.0);
}
