#include "util/util.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];

const char *ai_strerror(ai_status_t status)
{
    switch (status) {
    case AI_OK: return "success";
    case AI_ERR_INVALID: return "invalid argument";
    case AI_ERR_NOMEM: return "out of memory";
    case AI_ERR_IO: return "I/O error";
    case AI_ERR_TIMEOUT: return "timed out";
    case AI_ERR_PEER: return "peer failed";
    case AI_ERR_PROTO: return "protocol error";
    case AI_ERR_PARSE: return "parse error";
    case AI_ERR_UNSUPPORTED: return "unsupported";
    case AI_ERR_INFEASIBLE: return "infeasible";
    case AI_ERR_ABORTED: return "communicator aborted";
    case AI_ERR_NOTFOUND: return "not found";
    case AI_ERR_REVOKED: return "communicator revoked";
    }
    return "unknown error";
}

const char *ai_last_error(void) { return last_error; }

void util_clear_error(void) { last_error[0] = '\0'; }

ai_status_t util_fail(ai_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

ai_status_t util_fail_prefix(ai_status_t status, const char *fmt, ...)
{
    char prefix[256], old[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    snprintf(last_error, sizeof last_error, "%s: %s", prefix,
             old[0] ? old : ai_strerror(status));
    return status;
}
