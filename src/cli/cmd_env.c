/*
 * autoinfra env: every setting of the library's table (ai_setting_get),
 * its value in effect here, where the value came from, its range and its
 * one line of doc; --json for scripts. Exit 1 when the environment holds
 * a value the library would refuse (each is shown with why), so that a
 * job script can check its settings before it starts ranks.
 */
#include "autoinfra.h"
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static void env_help(FILE *out)
{
    fprintf(out,
            "usage: autoinfra env [--json]\n\n"
            "Print every AUTOINFRA_* setting the library reads: its value in effect, its source\n"
            "(default or environment), its type and range, and what it does\n"
            "(docs/runtime.md, \"Settings\").\n\n"
            "  --json   one JSON object: {\"settings\": [{name, value, source, type, default,\n"
            "           range, doc, problem}, ...]} (value and default null when unset)\n\n"
            "Exit status 1 when a variable in the environment holds a value the library\n"
            "refuses (the line says why), 2 on a usage error.\n");
}

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

int cli_env_main(int argc, char **argv)
{
    int as_json = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            as_json = 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            env_help(stdout);
            return 0;
        } else {
            fprintf(stderr, "autoinfra env: unknown option '%s'\n", argv[i]);
            env_help(stderr);
            return 2;
        }
    }
    json_t *root = as_json ? json_object() : NULL, *list = as_json ? json_array() : NULL;
    if (as_json && (!root || !list || json_object_set_new(root, "settings", list) != 0)) {
        json_decref(root);
        fprintf(stderr, "autoinfra env: out of memory\n");
        return 1;
    }
    int n = ai_setting_count();
    for (int i = 0; i < n; i++) {
        ai_setting s;
        if (ai_setting_get(i, &s) != AI_OK) {
            fprintf(stderr, "autoinfra env: %s\n", ai_last_error());
            json_decref(root);
            return 1;
        }
        bad |= s.problem != NULL;
        if (as_json) {
            json_t *o = json_pack("{s:s, s:o, s:s, s:s, s:o, s:s, s:s, s:o}", "name", s.name,
                                  "value", str_or_null(s.value), "source", s.source, "type",
                                  s.type, "default", str_or_null(s.default_value), "range",
                                  s.range, "doc", s.doc, "problem", str_or_null(s.problem));
            if (!o || json_array_append_new(list, o) != 0) {
                json_decref(root);
                fprintf(stderr, "autoinfra env: out of memory\n");
                return 1;
            }
            continue;
        }
        printf("%-22s %-12s %-11s %s%s%s\n", s.name, s.value ? s.value : "(unset)", s.source,
               s.type, s.range[0] ? " " : "", s.range);
        printf("    %s\n", s.doc);
        if (s.problem)
            printf("    refused: %s\n", s.problem);
    }
    if (as_json && cli_print_json(root) != 0)
        return 1;
    return bad;
}
