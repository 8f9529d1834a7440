#include "util/util.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

double ai_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void util_sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

ai_status_t util_parse_long(const char *text, long *out)
{
    if (!text || !*text)
        return util_fail(AI_ERR_INVALID, "empty number");
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end)
        return util_fail(AI_ERR_INVALID, "'%s' is not an integer", text);
    *out = v;
    return AI_OK;
}

ai_status_t util_parse_double(const char *text, double *out)
{
    if (!text || !*text)
        return util_fail(AI_ERR_INVALID, "empty number");
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || *end || !isfinite(v))
        return util_fail(AI_ERR_INVALID, "'%s' is not a number", text);
    *out = v;
    return AI_OK;
}

/* Levenshtein distance, case-insensitive, of two short words (longer
 * ones are compared by their first 63 characters). */
static int edit_distance(const char *a, const char *b)
{
    int row[64], la = (int)AI_MIN(strlen(a), 63), lb = (int)AI_MIN(strlen(b), 63);
    for (int j = 0; j <= lb; j++)
        row[j] = j;
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j];
            int same = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]);
            row[j] = AI_MIN(AI_MIN(row[j] + 1, row[j - 1] + 1), diag + !same);
            diag = up;
        }
    }
    return row[lb];
}

const char *util_nearest_name(const char *word, const char *const *names, int n)
{
    const char *best = NULL;
    int bd = 1 << 30, limit = AI_MAX(1, (int)strlen(word) / 3);
    for (int i = 0; i < n; i++) {
        int d = edit_distance(word, names[i]);
        if (d < bd) {
            bd = d;
            best = names[i];
        }
    }
    return bd <= limit ? best : NULL;
}

/* The size grammar (autoinfra.h): digits, then an optional unit, any
 * case: B; K, KB, KiB; M, MB, MiB; G, GB, GiB; T, TB, TiB, all powers of
 * 1024 (buffer sizes are powers of two; "64KB" meaning 64000 would make
 * every bucket edge odd). */
ai_status_t ai_parse_size(const char *text, size_t *out)
{
    static const char units[] = "KMGT";
    const char *p = text;
    unsigned long long v = 0;
    unsigned shift = 0;
    if (!text || *p < '0' || *p > '9')
        goto err_syntax;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (ULLONG_MAX - 9) / 10)
            goto err_range;
        v = v * 10 + (unsigned)(*p - '0');
    }
    const char *u = *p ? strchr(units, toupper((unsigned char)*p)) : NULL;
    if (u) {
        shift = 10 * (unsigned)(u - units + 1);
        p++;
        if ((*p == 'i' || *p == 'I') && (p[1] == 'b' || p[1] == 'B'))
            p++;
    }
    if (*p == 'b' || *p == 'B')
        p++;
    if (*p)
        goto err_syntax;
    if (v > (unsigned long long)SIZE_MAX >> shift)
        goto err_range;
    *out = (size_t)(v << shift);
    return AI_OK;
err_range:
    return util_fail(AI_ERR_INVALID, "size '%s' is too large", text);
err_syntax:
    return util_fail(AI_ERR_INVALID,
                     "'%s' is not a size (a number and an optional unit B, K/KB/KiB, M/MB/MiB, "
                     "G/GB/GiB, T/TB/TiB, e.g. 8, 64K, 4MiB, 1G)",
                     text ? text : "(null)");
}

uint64_t util_hash64(const void *data, size_t n, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ULL ^ seed;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void util_rng_seed(ai_rng *rng, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t util_rng_next(ai_rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double util_rng_uniform(ai_rng *rng) { return (double)(util_rng_next(rng) >> 11) * 0x1.0p-53; }

ai_status_t util_hostlist_first(const char *list, char *out, size_t cap)
{
    /* Slurm's grammar: comma-separated names, each a prefix, then
     * optionally "[" ranges "]" and a suffix; a range keeps the zero
     * padding of its first bound. The first host is the prefix, the first
     * range's first bound and what follows "]" up to the next comma. */
    const char *p = list ? list : "";
    size_t n = strcspn(p, ",[");
    if (n == 0)
        return util_fail(AI_ERR_INVALID, "Slurm hostlist '%s' does not start with a host name", p);
    char buf[256];
    if (n >= sizeof buf)
        return util_fail(AI_ERR_INVALID, "Slurm hostlist '%s': host name too long", p);
    memcpy(buf, p, n);
    size_t len = n;
    if (p[n] == '[') {
        const char *num = p + n + 1;
        size_t digits = strspn(num, "0123456789");
        const char *close = strchr(num, ']');
        if (digits == 0 || !close || (num[digits] != '-' && num[digits] != ',' && num[digits] != ']'))
            return util_fail(AI_ERR_INVALID, "Slurm hostlist '%s': malformed range", p);
        size_t tail = strcspn(close + 1, ",[");
        if (close[1 + tail] == '[')
            return util_fail(AI_ERR_INVALID, "Slurm hostlist '%s': more than one range in a name is not "
                             "supported (set AUTOINFRA_ADDR)", p);
        if (len + digits + tail >= sizeof buf)
            return util_fail(AI_ERR_INVALID, "Slurm hostlist '%s': host name too long", p);
        memcpy(buf + len, num, digits);
        len += digits;
        memcpy(buf + len, close + 1, tail);
        len += tail;
    }
    buf[len] = 0;
    if (len >= cap)
        return util_fail(AI_ERR_INVALID, "Slurm hostlist '%s': host name too long", p);
    memcpy(out, buf, len + 1);
    return AI_OK;
}
