#include "util/util.h"

#include <stdio.h>

static int log_rank = -1;
static int log_level = -1;

void util_log_set_rank(int rank) { log_rank = rank; }

ai_status_t util_log_level_env(ai_log_level *out)
{
    int i = AI_LOG_WARN;
    ai_status_t st = util_param_int(UTIL_PARAM_LOG, &i);
    *out = (ai_log_level)i;
    return st;
}

/* An unknown AUTOINFRA_LOG logs at warn here (ai_comm_create refuses it).
 * No util_fail on this path: a message being logged may be the last error. */
static int current_level(void)
{
    if (log_level < 0)
        log_level = util_param_int_or(UTIL_PARAM_LOG, AI_LOG_WARN);
    return log_level;
}

void util_log(ai_log_level level, const char *fmt, ...)
{
    if ((int)level > current_level())
        return;
    static const char *tags[] = {"error", "warning", "info", "debug"};
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (log_rank >= 0)
        fprintf(stderr, "autoinfra[%d]: %s: %s\n", log_rank, tags[level], msg);
    else
        fprintf(stderr, "autoinfra: %s: %s\n", tags[level], msg);
}
