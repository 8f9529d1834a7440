/*
 * The table of settings: every AUTOINFRA_* variable the library reads,
 * declared once with its type, default, range and one line of doc
 * (docs/runtime.md, "Settings", is this table; `autoinfra env` prints it
 * with the values in effect).
 *
 * Why one table: a variable read in the file that uses it ends up read
 * twice with two defaults, documented in three places, and checked in
 * one of them. Here each is parsed and range-checked once into a
 * snapshot; the layers ask the snapshot (util_param_*), never the
 * environment, and a bad value is refused with the variable's name, its
 * text and what is accepted, at whichever layer asks first.
 *
 * When the environment is read: at the first use, and again at each
 * public call that starts from configuration (communicator creation,
 * ai_comm_join, ai_kb_default_path: util_param_refresh). Within one such
 * call every layer sees the same values; a program that sets a variable
 * before creating its next communicator is heard. A mutex guards the
 * snapshot, and strings handed out stay valid for the life of the
 * process (interned), so a refresh on one thread never pulls a string
 * from under another.
 *
 * Variables that are not ours (a launcher's rank, HOME) are read through
 * util_env_outside, which answers only for the names it lists, so that
 * every read of the environment is declared in this file.
 */
#include "util/util.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const log_names[] = {"error", "warn", "info", "debug"};

/* Sizes: lo, hi in bytes; step: a value must be a multiple of it. */
#define KiB 1024.0
#define GiB (1024.0 * 1024 * 1024)

static const util_param_info table[UTIL_PARAM_COUNT] = {
    [UTIL_PARAM_LOG] = {"AUTOINFRA_LOG", UTIL_PARAM_T_CHOICE, "warn", 0, 0, 0, log_names, 4,
                        "messages on stderr at this level and above"},
    [UTIL_PARAM_RANK] = {"AUTOINFRA_RANK", UTIL_PARAM_T_STR, NULL, 0, 0, 0, NULL, 0,
                         "this process's rank, 0..size-1 (with AUTOINFRA_SIZE; else the "
                         "launcher's: Open MPI, MPICH, PMIx, Slurm)"},
    [UTIL_PARAM_SIZE] = {"AUTOINFRA_SIZE", UTIL_PARAM_T_STR, NULL, 0, 0, 0, NULL, 0,
                         "ranks in the job, 1..1048576 (with AUTOINFRA_RANK)"},
    [UTIL_PARAM_ADDR] = {"AUTOINFRA_ADDR", UTIL_PARAM_T_STR, NULL, 0, 0, 0, NULL, 0,
                         "host:port of the rendezvous store on rank 0 (unset: 127.0.0.1, "
                         "port from the launcher's job id or 29477)"},
    [UTIL_PARAM_TOKEN] = {"AUTOINFRA_TOKEN", UTIL_PARAM_T_STR, NULL, 0, 0, 0, NULL, 0,
                          "job token; ranks showing another are refused (unset: the "
                          "launcher's job id, else \"autoinfra\")"},
    [UTIL_PARAM_HOST] = {"AUTOINFRA_HOST", UTIL_PARAM_T_STR, NULL, 0, 0, 0, NULL, 0,
                         "what counts as one host: ranks with equal ids share memory "
                         "(unset: the hostname)"},
    [UTIL_PARAM_JOIN_ADDR] = {"AUTOINFRA_JOIN_ADDR", UTIL_PARAM_T_STR, NULL, 0, 0, 0, NULL, 0,
                              "host:port of a job's join door, for ai_comm_join without one"},
    [UTIL_PARAM_JOIN_DOOR] = {"AUTOINFRA_JOIN_DOOR", UTIL_PARAM_T_STR, NULL, 0, 0, 0, NULL, 0,
                              "host:port[,host:port...]: rank 0 opens the join door at the first it "
                              "can bind, and every new rank 0 again (unset: rank 0's data listener)"},
    [UTIL_PARAM_TIMEOUT] = {"AUTOINFRA_TIMEOUT", UTIL_PARAM_T_DOUBLE, "30", 0, 1e6, 0, NULL, 0,
                            "seconds every wait may take before a peer counts as stalled "
                            "(0: the default)"},
    [UTIL_PARAM_CHANNELS] = {"AUTOINFRA_CHANNELS", UTIL_PARAM_T_INT, "2", 0, 8, 0, NULL, 0,
                             "TCP connections per peer pair: the most a call stripes over "
                             "(calls use one unless the learner or the caller picks more; "
                             "0: the default)"},
    [UTIL_PARAM_NO_SHM] = {"AUTOINFRA_NO_SHM", UTIL_PARAM_T_INT, "0", 0, 1, 0, NULL, 0,
                           "1: never use shared memory, every peer over TCP"},
    [UTIL_PARAM_SPIN_US] = {"AUTOINFRA_SPIN_US", UTIL_PARAM_T_DOUBLE, "1000", 0, 1e6, 0, NULL, 0,
                            "microseconds a TCP-only wait polls before it sleeps (unset "
                            "with block_waits: 0)"},
    [UTIL_PARAM_YIELD_US] = {"AUTOINFRA_YIELD_US", UTIL_PARAM_T_DOUBLE, "200", 0, 1e7, 0, NULL, 0,
                             "microseconds a shared-memory wait yields the core before it "
                             "sleeps on its doorbell (unset with block_waits: 0)"},
    /* The ring's default: large enough that a sender rarely waits for the
     * receiver on large messages, small enough for 8 ranks (56 rings). */
    [UTIL_PARAM_SHM_RING] = {"AUTOINFRA_SHM_RING", UTIL_PARAM_T_SIZE, "512K", 4 * KiB, GiB,
                             4096, NULL, 0,
                             "shared-memory ring per direction and peer pair, a multiple "
                             "of 4K"},
    [UTIL_PARAM_SHM_NT] = {"AUTOINFRA_SHM_NT", UTIL_PARAM_T_INT, "2", 0, 2, 0, NULL, 0,
                           "shared-memory writes of 16K or more (ring sends, direct's slots) "
                           "past the cache (non-temporal stores): 0 never, 1 always, 2 while "
                           "such copies run 4x slower than their best or 6x a copy within "
                           "the core"},
    [UTIL_PARAM_PROBE_BYTES] = {"AUTOINFRA_PROBE_BYTES", UTIL_PARAM_T_SIZE, "1M", 4 * KiB, GiB,
                                0, NULL, 0, "message size of the link probe (ai_comm_probe)"},
    [UTIL_PARAM_TUNE] = {"AUTOINFRA_TUNE", UTIL_PARAM_T_INT, "1", 0, 1, 0, NULL, 0,
                         "0: no learner; `auto` is the model's or the fixed rule's choice"},
    [UTIL_PARAM_TUNE_MIN] = {"AUTOINFRA_TUNE_MIN", UTIL_PARAM_T_SIZE, "64K", 0, 1024 * GiB, 0,
                             NULL, 0, "calls smaller than this are not learned"},
    [UTIL_PARAM_TUNE_BUDGET] = {"AUTOINFRA_TUNE_BUDGET", UTIL_PARAM_T_INT, "24", 0, 1e6, 0, NULL,
                                0, "exploratory calls per size bucket at most"},
    [UTIL_PARAM_TUNE_REFINE] = {"AUTOINFRA_TUNE_REFINE", UTIL_PARAM_T_INT, "32", 0, 1e6, 0, NULL,
                                0, "calls per bucket that may test a rival of the settled "
                                "arm (0: none)"},
    [UTIL_PARAM_TUNE_BOUND] = {"AUTOINFRA_TUNE_BOUND", UTIL_PARAM_T_DOUBLE, "1.5", 1, 1000, 0,
                               NULL, 0, "arms predicted slower than this many times the "
                               "best are not tried"},
    [UTIL_PARAM_TUNE_SAVE_S] = {"AUTOINFRA_TUNE_SAVE_S", UTIL_PARAM_T_DOUBLE, "1", 0, 86400, 0,
                                NULL, 0, "rank 0 writes the knowledge base at most this often "
                                "(seconds)"},
    [UTIL_PARAM_KB] = {"AUTOINFRA_KB", UTIL_PARAM_T_STR, NULL, 0, 0, 0, NULL, 0,
                       "the knowledge base file (unset: $XDG_CACHE_HOME/autoinfra/kb.sqlite, "
                       "else ~/.cache/autoinfra/kb.sqlite)"},
};

/* Variables set by launchers or the system that the library reads. */
static const char *const outside[] = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK",
    "PMIX_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_MCA_ess_base_jobid",
    "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE", "PMI_KVSNAME", "SLURM_STEP_ID", "SLURM_JOB_ID",
    "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES",
    "XDG_CACHE_HOME", "HOME",
};

typedef struct slot {
    int from_env;      /* the value came from the environment */
    ai_status_t st;    /* AI_OK, or why the environment's value is refused */
    char why[256];
    const char *text;  /* the environment's text (interned), NULL when unset */
    long long i;
    double d;
    size_t z;
} slot;

typedef struct interned {
    struct interned *next;
    char s[];
} interned;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int loaded;
static slot slots[UTIL_PARAM_COUNT];
static interned *strings;

/* A copy of s that lives as long as the process; NULL when out of memory. */
static const char *intern(const char *s)
{
    for (interned *p = strings; p; p = p->next)
        if (!strcmp(p->s, s))
            return p->s;
    size_t n = strlen(s) + 1;
    interned *p = malloc(sizeof *p + n);
    if (!p)
        return NULL;
    memcpy(p->s, s, n);
    p->next = strings;
    strings = p;
    return p->s;
}

const char *util_param_intern(const char *s)
{
    pthread_mutex_lock(&lock);
    const char *r = intern(s);
    pthread_mutex_unlock(&lock);
    return r;
}

static const char *env_text(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static void refuse(slot *s, const util_param_info *p, const char *v, const char *want)
{
    s->st = AI_ERR_INVALID;
    snprintf(s->why, sizeof s->why, "environment variable %s='%s' is not %s", p->name, v, want);
}

/* Parse text (the environment's or the default) into s. */
static void parse(const util_param_info *p, const char *v, slot *s)
{
    char want[160];
    long l;
    double d;
    size_t z;
    s->st = AI_OK;
    switch (p->type) {
    case UTIL_PARAM_T_STR:
        break;
    case UTIL_PARAM_T_INT:
        snprintf(want, sizeof want, "an integer in %.0f..%.0f", p->lo, p->hi);
        if (util_parse_long(v, &l) != AI_OK || l < p->lo || l > p->hi)
            refuse(s, p, v, want);
        else
            s->i = l;
        break;
    case UTIL_PARAM_T_DOUBLE:
        snprintf(want, sizeof want, "a number in %g..%g", p->lo, p->hi);
        if (util_parse_double(v, &d) != AI_OK || d < p->lo || d > p->hi)
            refuse(s, p, v, want);
        else
            s->d = d;
        break;
    case UTIL_PARAM_T_SIZE:
        snprintf(want, sizeof want, "a size in %.0f..%.0f bytes%s%.0zu (K, M, G: powers of two)",
                 p->lo, p->hi, p->step ? ", a multiple of " : "", p->step);
        if (ai_parse_size(v, &z) != AI_OK || (double)z < p->lo || (double)z > p->hi ||
            (p->step && z % p->step))
            refuse(s, p, v, want);
        else
            s->z = z;
        break;
    case UTIL_PARAM_T_CHOICE: {
        char list[160] = "";
        for (int k = 0; k < p->nchoices; k++) {
            if (!strcasecmp(v, p->choices[k])) {
                s->i = k;
                return;
            }
            size_t len = strlen(list);
            snprintf(list + len, sizeof list - len, "%s%s", k ? ", " : "", p->choices[k]);
        }
        const char *near = util_nearest_name(v, p->choices, p->nchoices);
        snprintf(want, sizeof want, "one of %s%s%s%s", list, near ? " (did you mean '" : "",
                 near ? near : "", near ? "'?)" : "");
        refuse(s, p, v, want);
        break;
    }
    }
}

/* Read every variable; the caller holds the lock. ai_parse_* record
 * their own messages: this runs inside a caller's call, so the thread's
 * last error is kept as it was. */
static void load_locked(void)
{
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", ai_last_error());
    for (int id = 0; id < UTIL_PARAM_COUNT; id++) {
        const util_param_info *p = &table[id];
        slot s = {0};
        const char *v = env_text(p->name);
        if (v && !(v = intern(v))) {
            s.st = AI_ERR_NOMEM;
            snprintf(s.why, sizeof s.why, "%s: out of memory", p->name);
        } else if (v) {
            s.from_env = 1;
            s.text = v;
            parse(p, v, &s);
        }
        if (!s.from_env || s.st != AI_OK) {
            slot d = {0};
            if (p->def)
                parse(p, p->def, &d);
            s.i = d.i;
            s.d = d.d;
            s.z = d.z;
        }
        slots[id] = s;
    }
    loaded = 1;
    if (saved[0])
        util_fail(AI_ERR_INVALID, "%s", saved);
    else
        util_clear_error();
}

void util_param_refresh(void)
{
    pthread_mutex_lock(&lock);
    load_locked();
    pthread_mutex_unlock(&lock);
}

static slot get(util_param_id id)
{
    pthread_mutex_lock(&lock);
    if (!loaded)
        load_locked();
    slot s = slots[id];
    pthread_mutex_unlock(&lock);
    return s;
}

const util_param_info *util_param_info_of(util_param_id id)
{
    return (unsigned)id < UTIL_PARAM_COUNT ? &table[id] : NULL;
}

/* The slot of id, which must be of type `type`; its error recorded. */
static ai_status_t checked(util_param_id id, util_param_type type, slot *out)
{
    if ((unsigned)id >= UTIL_PARAM_COUNT || table[id].type != type)
        return util_fail(AI_ERR_INVALID, "setting %d read as the wrong type", (int)id);
    *out = get(id);
    if (out->st != AI_OK)
        return util_fail(out->st, "%s", out->why);
    return AI_OK;
}

ai_status_t util_param_int(util_param_id id, int *out)
{
    slot s;
    ai_status_t st = checked(id, table[id].type == UTIL_PARAM_T_CHOICE ? UTIL_PARAM_T_CHOICE
                                                                     : UTIL_PARAM_T_INT, &s);
    if (st == AI_OK)
        *out = (int)s.i;
    return st;
}

int util_param_int_or(util_param_id id, int fallback)
{
    slot s = get(id);
    return s.st == AI_OK ? (int)s.i : fallback;
}

ai_status_t util_param_double(util_param_id id, double *out)
{
    slot s;
    ai_status_t st = checked(id, UTIL_PARAM_T_DOUBLE, &s);
    if (st == AI_OK)
        *out = s.d;
    return st;
}

ai_status_t util_param_size(util_param_id id, size_t *out)
{
    slot s;
    ai_status_t st = checked(id, UTIL_PARAM_T_SIZE, &s);
    if (st == AI_OK)
        *out = s.z;
    return st;
}

const char *util_param_str(util_param_id id)
{
    if ((unsigned)id >= UTIL_PARAM_COUNT || table[id].type != UTIL_PARAM_T_STR)
        return NULL;
    return get(id).text;
}

double util_param_default(util_param_id id)
{
    if ((unsigned)id >= UTIL_PARAM_COUNT || !table[id].def || table[id].type == UTIL_PARAM_T_STR)
        return 0;
    slot d = {0};
    parse(&table[id], table[id].def, &d);
    return table[id].type == UTIL_PARAM_T_DOUBLE ? d.d
           : table[id].type == UTIL_PARAM_T_SIZE ? (double)d.z : (double)d.i;
}

int util_param_is_set(util_param_id id) { return (unsigned)id < UTIL_PARAM_COUNT && get(id).from_env; }

const char *util_env_outside(const char *name)
{
    for (size_t i = 0; i < AI_ARRAY_LEN(outside); i++)
        if (!strcmp(name, outside[i]))
            return env_text(name);
    util_log(AI_LOG_ERROR, "util_env_outside: '%s' is not a listed variable", name);
    return NULL;
}

/* ------------------------------------------------ the public face (autoinfra.h) */

int ai_setting_count(void) { return UTIL_PARAM_COUNT; }

ai_status_t ai_setting_get(int index, ai_setting *out)
{
    static const char *const types[] = {"string", "int", "double", "size", "choice"};
    if (index < 0 || index >= UTIL_PARAM_COUNT || !out)
        return util_fail(AI_ERR_INVALID, "setting %d: want 0..%d", index, UTIL_PARAM_COUNT - 1);
    const util_param_info *p = &table[index];
    slot s = get((util_param_id)index);
    char range[192] = "";
    const char *v = s.text;
    if (p->type == UTIL_PARAM_T_CHOICE) {
        for (int k = 0; k < p->nchoices; k++) {
            size_t len = strlen(range);
            snprintf(range + len, sizeof range - len, "%s%s", k ? "|" : "", p->choices[k]);
        }
    } else if (p->type == UTIL_PARAM_T_DOUBLE) {
        snprintf(range, sizeof range, "%g..%g", p->lo, p->hi);
    } else if (p->type != UTIL_PARAM_T_STR) {
        snprintf(range, sizeof range, "%.0f..%.0f", p->lo, p->hi);
    }
    if (p->type == UTIL_PARAM_T_SIZE && p->lo >= 1024) {
        /* Sizes read best in the grammar they are written in. */
        snprintf(range, sizeof range, "%.0fK..%.0fG", p->lo / KiB, p->hi / GiB);
        if (p->step) {
            size_t len = strlen(range);
            snprintf(range + len, sizeof range - len, ", multiple of %zuK", p->step / 1024);
        }
    } else if (p->type == UTIL_PARAM_T_SIZE) {
        snprintf(range, sizeof range, "%.0f..%.0fG", p->lo, p->hi / GiB);
    }
    if (!v)
        v = p->def;
    pthread_mutex_lock(&lock);
    const char *rs = intern(range), *vs = v ? intern(v) : NULL;
    pthread_mutex_unlock(&lock);
    if (!rs || (v && !vs))
        return util_fail(AI_ERR_NOMEM, "setting %s", p->name);
    *out = (ai_setting){.name = p->name,
                        .type = types[p->type],
                        .value = vs,
                        .default_value = p->def,
                        .range = rs,
                        .source = s.from_env ? "environment" : p->def ? "default" : "unset",
                        .doc = p->doc,
                        .problem = NULL};
    if (s.st != AI_OK) {
        pthread_mutex_lock(&lock);
        out->problem = intern(s.why);
        pthread_mutex_unlock(&lock);
    }
    return AI_OK;
}
