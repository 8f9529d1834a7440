#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support/cmdtest.h"
#include "support/proc.h"

#include <unistd.h>

int cmdtest_setup(void **state)
{
    (void)state;
    alarm(CMDTEST_ALARM_S);
    return 0;
}

int cmdtest_teardown(void **state)
{
    (void)state;
    alarm(0);
    return 0;
}

int cmdtest_run(char *const *argv, double limit_s, char *out, size_t outlen, char *err,
                size_t errlen)
{
    int rc = proc_run(argv, limit_s, out, outlen, err, errlen);
    if (rc == PROC_TIMEOUT)
        fail_msg("%s %s still running after %.0f s", argv[0], argv[1] ? argv[1] : "", limit_s);
    return rc;
}
