/* util layer: the size grammar every flag, variable and plugin shares,
 * and the table of settings (util/param.c) with `autoinfra env`. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "autoinfra.h"
#include "util/util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static void test_sizes_accepted(void **state)
{
    static const struct {
        const char *text;
        size_t bytes;
    } ok[] = {
        {"0", 0},          {"8", 8},           {"8B", 8},          {"8b", 8},
        {"64K", 65536},    {"64KB", 65536},    {"64KiB", 65536},   {"64kib", 65536},
        {"64k", 65536},    {"4M", 4u << 20},   {"4MB", 4u << 20},  {"4MiB", 4u << 20},
        {"1G", 1u << 30},  {"1GB", 1u << 30},  {"1GiB", 1u << 30}, {"2T", (size_t)2 << 40},
        {"2TiB", (size_t)2 << 40},
    };
    (void)state;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        size_t v = 12345;
        if (ai_parse_size(ok[i].text, &v) != AI_OK)
            fail_msg("'%s' refused: %s", ok[i].text, ai_last_error());
        if (v != ok[i].bytes)
            fail_msg("'%s' read as %zu, expected %zu", ok[i].text, v, ok[i].bytes);
    }
}

static void test_sizes_refused(void **state)
{
    static const char *const bad[] = {
        "", "K", "KB", "-1", "+8", " 8", "8 ", "64 K", "64KX", "12X", "1.5M", "2Ki",
        "1KiBB", "1BB", "1P", "0x10", "99999999999999999999", "17179869184G",
    };
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t v = 12345;
        if (ai_parse_size(bad[i], &v) == AI_OK)
            fail_msg("'%s' accepted as %zu", bad[i], v);
        assert_int_equal(v, 12345); /* output written only on success */
        if (!strstr(ai_last_error(), bad[i]))
            fail_msg("'%s': the message '%s' does not name the text", bad[i], ai_last_error());
    }
    assert_int_equal(ai_parse_size(NULL, &(size_t){0}), AI_ERR_INVALID);
}

/* Every setting of the table, unset: the declared default, parsed. */
static void test_param_defaults(void **state)
{
    (void)state;
    for (int id = 0; id < UTIL_PARAM_COUNT; id++)
        unsetenv(util_param_info_of((util_param_id)id)->name);
    util_param_refresh();
    int i;
    double d;
    size_t z;
    assert_int_equal(util_param_double(UTIL_PARAM_TIMEOUT, &d), AI_OK);
    assert_true(d == 30);
    assert_true(util_param_default(UTIL_PARAM_TIMEOUT) == 30);
    assert_int_equal(util_param_int(UTIL_PARAM_CHANNELS, &i), AI_OK);
    assert_int_equal(i, 2);
    assert_int_equal(util_param_int(UTIL_PARAM_LOG, &i), AI_OK);
    assert_int_equal(i, AI_LOG_WARN);
    assert_int_equal(util_param_size(UTIL_PARAM_SHM_RING, &z), AI_OK);
    assert_int_equal(z, 512 * 1024);
    assert_int_equal(util_param_size(UTIL_PARAM_TUNE_MIN, &z), AI_OK);
    assert_int_equal(z, 64 * 1024);
    assert_int_equal(util_param_int(UTIL_PARAM_TUNE_REFINE, &i), AI_OK);
    assert_int_equal(i, 32);
    assert_null(util_param_str(UTIL_PARAM_KB));
    assert_int_equal(util_param_is_set(UTIL_PARAM_TIMEOUT), 0);
    /* Every entry is named, documented and has a default its own range
     * accepts (or none, for strings). */
    assert_int_equal(ai_setting_count(), UTIL_PARAM_COUNT);
    for (int k = 0; k < ai_setting_count(); k++) {
        ai_setting st;
        assert_int_equal(ai_setting_get(k, &st), AI_OK);
        assert_true(!strncmp(st.name, "AUTOINFRA_", 10));
        assert_true(st.doc && strlen(st.doc) > 10);
        if (st.problem)
            fail_msg("%s: default refused: %s", st.name, st.problem);
        assert_string_equal(st.source, st.default_value ? "default" : "unset");
    }
    assert_int_equal(ai_setting_get(UTIL_PARAM_COUNT, &(ai_setting){0}), AI_ERR_INVALID);
}

/* The environment's value wins, read at the refresh and not before. */
static void test_param_environment(void **state)
{
    (void)state;
    int i;
    double d;
    size_t z;
    setenv("AUTOINFRA_CHANNELS", "5", 1);
    setenv("AUTOINFRA_SHM_RING", "64K", 1);
    setenv("AUTOINFRA_LOG", "DEBUG", 1);
    setenv("AUTOINFRA_KB", "/tmp/somewhere.sqlite", 1);
    util_param_refresh();
    setenv("AUTOINFRA_TIMEOUT", "7", 1); /* after the refresh: not yet seen */
    assert_int_equal(util_param_int(UTIL_PARAM_CHANNELS, &i), AI_OK);
    assert_int_equal(i, 5);
    assert_int_equal(util_param_size(UTIL_PARAM_SHM_RING, &z), AI_OK);
    assert_int_equal(z, 64 * 1024);
    assert_int_equal(util_param_int(UTIL_PARAM_LOG, &i), AI_OK);
    assert_int_equal(i, AI_LOG_DEBUG);
    assert_string_equal(util_param_str(UTIL_PARAM_KB), "/tmp/somewhere.sqlite");
    assert_int_equal(util_param_double(UTIL_PARAM_TIMEOUT, &d), AI_OK);
    assert_true(d == 30);
    util_param_refresh();
    assert_int_equal(util_param_double(UTIL_PARAM_TIMEOUT, &d), AI_OK);
    assert_true(d == 7);
    assert_int_equal(util_param_is_set(UTIL_PARAM_TIMEOUT), 1);
    ai_setting st;
    assert_int_equal(ai_setting_get(UTIL_PARAM_CHANNELS, &st), AI_OK);
    assert_string_equal(st.value, "5");
    assert_string_equal(st.source, "environment");
    assert_string_equal(st.default_value, "2");
    /* The KB path ai_kb_default_path gives is the setting's. */
    char path[256];
    assert_int_equal(ai_kb_default_path(path, sizeof path), AI_OK);
    assert_string_equal(path, "/tmp/somewhere.sqlite");
    const char *const names[] = {"AUTOINFRA_CHANNELS", "AUTOINFRA_SHM_RING", "AUTOINFRA_LOG",
                                 "AUTOINFRA_KB", "AUTOINFRA_TIMEOUT"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        unsetenv(names[k]);
    util_param_refresh();
}

/* A value out of range or malformed is refused by every read, with the
 * variable's name, the text and what is accepted; never a silent default. */
static void test_param_refused(void **state)
{
    (void)state;
    static const struct {
        util_param_id id;
        const char *name, *value, *says;
    } bad[] = {
        {UTIL_PARAM_CHANNELS, "AUTOINFRA_CHANNELS", "9", "0..8"},
        {UTIL_PARAM_CHANNELS, "AUTOINFRA_CHANNELS", "two", "0..8"},
        {UTIL_PARAM_TIMEOUT, "AUTOINFRA_TIMEOUT", "-1", "0..1e+06"},
        {UTIL_PARAM_SHM_RING, "AUTOINFRA_SHM_RING", "5000", "multiple of 4096"},
        {UTIL_PARAM_SHM_RING, "AUTOINFRA_SHM_RING", "2G", "4096..1073741824"},
        {UTIL_PARAM_TUNE_MIN, "AUTOINFRA_TUNE_MIN", "64X", "a size"},
        {UTIL_PARAM_LOG, "AUTOINFRA_LOG", "inf", "did you mean 'info'"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        setenv(bad[k].name, bad[k].value, 1);
        util_param_refresh();
        int i = -7;
        double d = -7;
        size_t z = 7;
        ai_status_t st;
        const util_param_info *p = util_param_info_of(bad[k].id);
        if (p->type == UTIL_PARAM_T_DOUBLE)
            st = util_param_double(bad[k].id, &d);
        else if (p->type == UTIL_PARAM_T_SIZE)
            st = util_param_size(bad[k].id, &z);
        else
            st = util_param_int(bad[k].id, &i);
        assert_int_equal(st, AI_ERR_INVALID);
        assert_true(i == -7 && d == -7 && z == 7); /* outputs written only on success */
        const char *msg = ai_last_error();
        char quoted[64];
        snprintf(quoted, sizeof quoted, "%s='%s'", bad[k].name, bad[k].value);
        if (!strstr(msg, quoted) || !strstr(msg, bad[k].says))
            fail_msg("%s=%s: message '%s' lacks \"%s\" or \"%s\"", bad[k].name, bad[k].value,
                     msg, quoted, bad[k].says);
        ai_setting s;
        assert_int_equal(ai_setting_get((int)bad[k].id, &s), AI_OK);
        assert_non_null(s.problem);
        assert_string_equal(s.value, bad[k].value);
        unsetenv(bad[k].name);
    }
    util_param_refresh();
}

/* Run `autoinfra env ARGS` with extra environment; its stdout in buf. */
static int run_env(const char *extra, const char *args, char *buf, size_t len)
{
    const char *bin = getenv("AUTOINFRA_BIN");
    if (!bin)
        return -1;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "env -u AUTOINFRA_KB %s '%s' env %s 2>/dev/null", extra, bin, args);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    int rc = pclose(f);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_cli_env(void **state)
{
    (void)state;
    if (!getenv("AUTOINFRA_BIN"))
        skip();
    static char out[65536];
    assert_int_equal(run_env("AUTOINFRA_TIMEOUT=7", "", out, sizeof out), 0);
    /* Every setting, one line each with value and source. */
    for (int k = 0; k < ai_setting_count(); k++) {
        ai_setting s;
        assert_int_equal(ai_setting_get(k, &s), AI_OK);
        if (!strstr(out, s.name) || !strstr(out, s.doc))
            fail_msg("autoinfra env lacks %s or its doc", s.name);
    }
    const char *t = strstr(out, "AUTOINFRA_TIMEOUT ");
    assert_non_null(t);
    char name[64], value[64], source[64];
    assert_int_equal(sscanf(t, "%63s %63s %63s", name, value, source), 3);
    assert_string_equal(value, "7");
    assert_string_equal(source, "environment");
    t = strstr(out, "AUTOINFRA_CHANNELS ");
    assert_int_equal(sscanf(t, "%63s %63s %63s", name, value, source), 3);
    assert_string_equal(value, "2");
    assert_string_equal(source, "default");

    assert_int_equal(run_env("AUTOINFRA_CHANNELS=3", "--json", out, sizeof out), 0);
    json_error_t err;
    json_t *root = json_loads(out, 0, &err);
    if (!root)
        fail_msg("autoinfra env --json: %s", err.text);
    json_t *list = json_object_get(root, "settings");
    assert_int_equal(json_array_size(list), (size_t)ai_setting_count());
    int seen = 0;
    for (size_t k = 0; k < json_array_size(list); k++) {
        json_t *o = json_array_get(list, k);
        if (strcmp(json_string_value(json_object_get(o, "name")), "AUTOINFRA_CHANNELS"))
            continue;
        seen = 1;
        assert_string_equal(json_string_value(json_object_get(o, "value")), "3");
        assert_string_equal(json_string_value(json_object_get(o, "source")), "environment");
        assert_string_equal(json_string_value(json_object_get(o, "default")), "2");
        assert_string_equal(json_string_value(json_object_get(o, "range")), "0..8");
        assert_true(json_is_null(json_object_get(o, "problem")));
    }
    json_decref(root);
    assert_true(seen);

    /* A refused value: exit 1, the line says why. */
    assert_int_equal(run_env("AUTOINFRA_NO_SHM=2", "", out, sizeof out), 1);
    assert_non_null(strstr(out, "AUTOINFRA_NO_SHM='2' is not an integer in 0..1"));
    assert_int_equal(run_env("", "--bogus", out, sizeof out), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_accepted),
        cmocka_unit_test(test_sizes_refused),
        cmocka_unit_test(test_param_defaults),
        cmocka_unit_test(test_param_environment),
        cmocka_unit_test(test_param_refused),
        cmocka_unit_test(test_cli_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
