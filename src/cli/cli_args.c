/* Argument parsing shared by the subcommands (cli.h). */
#include "autoinfra.h"
#include "autoinfra/introspect.h"
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
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
    char buf[64];
    size_t len = stop ? (size_t)(stop - text) : strlen(text);
    if (len >= sizeof buf)
        return -1;
    memcpy(buf, text, len);
    buf[len] = '\0';
    return ai_parse_size(buf, out) == AI_OK ? 0 : -1;
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

int cli_kb_path(const char *given, const char *cmd, char *buf, size_t len)
{
    if (given) {
        if ((size_t)snprintf(buf, len, "%s", given) >= len) {
            fprintf(stderr, "autoinfra %s: --kb path is too long\n", cmd);
            return 1;
        }
        return 0;
    }
    if (ai_kb_default_path(buf, len) != AI_OK) {
        fprintf(stderr, "autoinfra %s: %s\n", cmd, ai_last_error());
        return 1;
    }
    return 0;
}

int cli_print_json(json_t *root)
{
    char *s = root ? json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(root);
    return s ? 0 : 1;
}
