/*
 * `srun --autoinfra[=OPTIONS]`: a SPANK plugin (Slurm's plugin interface
 * for job steps, spank.h of libslurm-dev) that sets the runtime's
 * environment for every task of a step, so that an unchanged program
 * (`build/autoinfra bench`, a torch job on the autoinfra backend, an MPI
 * program under the shim) uses the learner and a knowledge base the
 * cluster's jobs share (docs/slurm.md).
 *
 * OPTIONS is a comma list:
 *   kb:PATH        AUTOINFRA_KB: the knowledge base (default: the
 *                  runtime's own default)
 *   tune:MODE      AUTOINFRA_TUNE
 *   host:node      AUTOINFRA_HOST = the Slurm node name (the default:
 *                  ranks on one Slurm node share memory, ranks on two
 *                  talk over TCP, as on a real cluster; it also makes
 *                  several slurmd on one machine act as several hosts)
 *   host:machine   leave AUTOINFRA_HOST alone (the machine's host name)
 *   timeout:S      AUTOINFRA_TIMEOUT
 *
 * In srun (local context) it draws a random job token and puts it in the
 * step's environment (AUTOINFRA_TOKEN, 128 bits from getrandom), unless the
 * user set one: the token never derives from a job id anyone can read from
 * squeue. The rendezvous address is the step's first node
 * (SLURM_STEP_NODELIST), which the runtime finds itself.
 *
 * Only spank.h and libc: the plugin is loaded into srun and slurmstepd,
 * where nothing of autoinfra may run.
 */
#include <slurm/spank.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

SPANK_PLUGIN(autoinfra, 1);

enum { HOST_NODE, HOST_MACHINE };

static struct {
    int on;
    char kb[1024];
    char tune[64];
    char timeout[32];
    int host;
} opt = {.host = HOST_NODE};

/* One "key:value" item into opt; -1 with Slurm's error log on a bad one. */
static int parse_item(const char *item)
{
    const char *colon = strchr(item, ':');
    size_t klen = colon ? (size_t)(colon - item) : strlen(item);
    const char *v = colon ? colon + 1 : "";
    struct {
        const char *key;
        char *dst;
        size_t cap;
    } fields[] = {
        {"kb", opt.kb, sizeof opt.kb},
        {"tune", opt.tune, sizeof opt.tune},
        {"timeout", opt.timeout, sizeof opt.timeout},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (strlen(fields[i].key) != klen || strncmp(item, fields[i].key, klen) != 0)
            continue;
        if (!*v || strlen(v) >= fields[i].cap) {
            slurm_error("autoinfra: --autoinfra %.*s: needs a value of 1..%zu characters", (int)klen,
                        item, fields[i].cap - 1);
            return -1;
        }
        strcpy(fields[i].dst, v);
        return 0;
    }
    if (klen == 4 && strncmp(item, "host", 4) == 0) {
        if (strcmp(v, "node") == 0)
            opt.host = HOST_NODE;
        else if (strcmp(v, "machine") == 0)
            opt.host = HOST_MACHINE;
        else {
            slurm_error("autoinfra: --autoinfra host:%s: expected host:node or host:machine", v);
            return -1;
        }
        return 0;
    }
    slurm_error("autoinfra: --autoinfra: unknown option '%s' (kb:PATH, tune:MODE, host:node|machine, "
                "timeout:S)", item);
    return -1;
}

/* Called where the option is parsed (srun, sbatch) and again in slurmstepd
 * with the same argument. */
static int option_cb(int val, const char *optarg, int remote)
{
    opt.on = 1;
    if (!optarg || !*optarg)
        return 0;
    char buf[2048];
    if (strlen(optarg) >= sizeof buf) {
        slurm_error("autoinfra: --autoinfra: options longer than %zu characters", sizeof buf - 1);
        return -1;
    }
    strcpy(buf, optarg);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save))
        if (parse_item(item) != 0)
            return -1;
    return 0;
}

struct spank_option spank_options[] = {
    {"autoinfra", "[OPTIONS]",
     "Run the step's tasks on autoinfra's learner and knowledge base. OPTIONS: comma list of "
     "kb:PATH (knowledge base), tune:MODE, host:node|machine (what counts as one host; "
     "default node), timeout:S. A random job token is drawn per step.",
     2, 0, option_cb},
    SPANK_OPTIONS_TABLE_END,
};

/* srun, before the step is launched: the token into the step's
 * environment. */
int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
    if (!opt.on || getenv("AUTOINFRA_TOKEN"))
        return 0;
    unsigned char raw[16];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            slurm_error("autoinfra: getrandom failed: %s", strerror(errno));
            return -1;
        }
        got += (size_t)n;
    }
    char hex[2 * sizeof raw + 1];
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    /* srun exports its environment to the tasks (--export=ALL, the
     * default); with --export=NONE the token must be set by the user. */
    if (setenv("AUTOINFRA_TOKEN", hex, 0) != 0) {
        slurm_error("autoinfra: cannot set AUTOINFRA_TOKEN: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static int set_task_env(spank_t sp, const char *var, const char *val)
{
    if (!val || !*val)
        return 0;
    if (spank_setenv(sp, var, val, 1) != ESPANK_SUCCESS) {
        slurm_error("autoinfra: cannot set %s for the task", var);
        return -1;
    }
    return 0;
}

/* slurmstepd, in each task before it execs: the runtime's settings. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    if (!opt.on)
        return 0;
    char node[256] = "";
    if (opt.host == HOST_NODE &&
        spank_getenv(sp, "SLURMD_NODENAME", node, sizeof node) != ESPANK_SUCCESS) {
        slurm_error("autoinfra: SLURMD_NODENAME is not set in the task's environment");
        return -1;
    }
    if (set_task_env(sp, "AUTOINFRA_HOST", node) || set_task_env(sp, "AUTOINFRA_KB", opt.kb) ||
        set_task_env(sp, "AUTOINFRA_TUNE", opt.tune) || set_task_env(sp, "AUTOINFRA_TIMEOUT", opt.timeout))
        return -1;
    return 0;
}
