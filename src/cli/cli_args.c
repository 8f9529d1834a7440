/* Argument parsing shared by the subcommands (cli.h). */
#include "cli.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int cli_parse_long(const char *text, long min, long max, long *out)
{
    char *end;
    if (!text || !*text)
        return -1;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_int(const char *text, long min, long max, int *out)
{
    long v;
    if (cli_parse_long(text, min, max, &v))
        return -1;
    *out = (int)v;
    return 0;
}

int cli_parse_size(const char *text, const char *stop, size_t *out)
{
    size_t v = 0, mul = 1;
    const char *p = text;
    if (!stop)
        stop = text + strlen(text);
    if (p == stop)
        return -1;
    for (; p < stop && *p >= '0' && *p <= '9'; p++) {
        if (v > (SIZE_MAX - 9) / 10)
            return -1;
        v = v * 10 + (size_t)(*p - '0');
    }
    if (p == text)
        return -1;
    if (p < stop) {
        switch (*p) {
        case 'k': case 'K': mul = (size_t)1 << 10; break;
        case 'm': case 'M': mul = (size_t)1 << 20; break;
        case 'g': case 'G': mul = (size_t)1 << 30; break;
        default: return -1;
        }
        if (++p != stop)
            return -1;
    }
    if (v > SIZE_MAX / mul)
        return -1;
    *out = v * mul;
    return 0;
}

int cli_match_opt(int argc, char **argv, int *i, const char *name, const char **value)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n))
        return 0;
    if (a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (a[n])
        return 0;
    if (*i + 1 >= argc)
        return -1;
    *value = argv[++*i];
    return 1;
}
