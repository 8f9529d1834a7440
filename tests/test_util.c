/* util layer: the size grammar every flag, variable and plugin shares. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "autoinfra.h"

#include <stdio.h>
#include <string.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_accepted),
        cmocka_unit_test(test_sizes_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
