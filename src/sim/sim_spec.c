/*
 * The reliability spec (docs/formats.md, "Reliability"): defaults and
 * validation. Messages follow the other specs: "<file>: <json.path>: <what>".
 *
 * Where the defaults come from:
 *  - failures_per_node_day and the causes: Llama Team, "The Llama 3 Herd
 *    of Models", arXiv 2407.21783, Table 5: 419 unexpected interruptions in
 *    a 54-day snapshot of pre-training on 16,384 H100 GPUs (2,048 nodes of
 *    8), i.e. 419 / (54 x 2048) per node-day, with the table's counts by
 *    root cause.
 *  - storage_GBps: the same paper, section 3.3.1: the checkpoint store
 *    sustains 2 TB/s.
 *  - detect_s, shrink_s, grow_s, join_s: autoinfra's own recovery of a
 *    training job (bench/results/train/faults-T1.json, docs/train.md): kill
 *    to the survivors' error 1.13 s, error to the shrunk group ready
 *    0.24 s, the grow 0.68 s, a joiner's start to its first step 4.22 s.
 *  - restart_s, repair_h, spares, host_copy_GBps, lemon_factor and the
 *    telemetry of the learned policy (warn_*, false_alarms_per_node_day):
 *    assumed (docs/sim.md says so); no published figure for these.
 */
#include "sim/sim.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Llama 3 Table 5, interruption counts by root cause (sum 419). The
 * software and unknown causes leave the node healthy; a software bug or a
 * broken dependency hits every rank alike and silent data corruption
 * spoils the state in memory, so those roll the whole job back even when
 * the others could be survived by a live shrink. */
static const struct {
    const char *name;
    int count;
    int repair, restart;
} llama3_causes[] = {
    {"faulty GPU", 148, 1, 0},
    {"GPU HBM3 memory", 72, 1, 0},
    {"software bug", 54, 0, 1},
    {"network switch/cable", 35, 1, 0},
    {"host maintenance", 32, 1, 0},
    {"GPU SRAM memory", 19, 1, 0},
    {"GPU system processor", 17, 1, 0},
    {"NIC", 7, 1, 0},
    {"NCCL watchdog timeouts", 7, 0, 0},
    {"silent data corruption", 6, 1, 1},
    {"GPU thermal interface + sensor", 6, 1, 0},
    {"SSD", 3, 1, 0},
    {"power supply", 3, 1, 0},
    {"server chassis", 2, 1, 0},
    {"IO expansion board", 2, 1, 0},
    {"dependency", 2, 0, 1},
    {"CPU", 2, 1, 0},
    {"system memory", 2, 1, 0},
};

void sim_reliability_defaults(sim_reliability *r)
{
    memset(r, 0, sizeof *r);
    r->failures_per_node_day = 419.0 / (54.0 * 2048.0);
    r->restart_s = 300;
    r->shrink_s = 0.24;
    r->grow_s = 0.68;
    r->join_s = 4.22;
    r->detect_s = 1.13;
    r->checkpoint_write_s = -1;
    r->storage_GBps = 2000;
    r->checkpoint_async = 0;
    r->host_copy_GBps = 50;
    r->spares = -1;
    r->repair_h = 24;
    r->lemon_nodes = 0;
    r->lemon_factor = 10;
    r->warn_recall = 0.5;
    r->warn_lead_s = 600;
    r->warn_separation = 3;
    r->warn_window_s = 3600;
    r->false_alarms_per_node_day = 0.01;
    r->warn_precision = 0;
    r->ncauses = (int)AI_ARRAY_LEN(llama3_causes);
    for (int i = 0; i < r->ncauses; i++) {
        snprintf(r->causes[i].name, sizeof r->causes[i].name, "%s", llama3_causes[i].name);
        r->causes[i].share = llama3_causes[i].count;
        r->causes[i].needs_repair = llama3_causes[i].repair;
        r->causes[i].restart = llama3_causes[i].restart;
    }
}

static ai_status_t rel_err(const char *file, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ai_status_t rel_err(const char *file, const char *path, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return util_fail(AI_ERR_INVALID, "%s: %s: %s", file, path[0] ? path : "(root)", msg);
}

static ai_status_t check_keys(const char *file, json_t *obj, const char *base,
                              const char *const *known, int n)
{
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        int found = 0;
        for (int i = 0; i < n && !found; i++)
            found = !strcmp(key, known[i]);
        if (found)
            continue;
        char path[200], list[600] = "";
        snprintf(path, sizeof path, "%s%s%s", base, base[0] ? "." : "", key);
        for (int i = 0; i < n; i++) {
            size_t len = strlen(list);
            snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", known[i]);
        }
        const char *near = util_nearest_name(key, known, n);
        return rel_err(file, path, "unknown key%s%s%s (known here: %s)",
                       near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "", list);
    }
    return AI_OK;
}

static ai_status_t get_num(const char *file, json_t *obj, const char *base, const char *key,
                           double lo, double hi, double *out)
{
    char path[200];
    snprintf(path, sizeof path, "%s%s%s", base, base[0] ? "." : "", key);
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return AI_OK;
    if (!json_is_number(v))
        return rel_err(file, path, "expected a number");
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        return rel_err(file, path, "%g is out of range %g..%g", d, lo, hi);
    *out = d;
    return AI_OK;
}

static ai_status_t get_int(const char *file, json_t *obj, const char *key, long lo, long hi,
                           int *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return AI_OK;
    if (!json_is_number(v))
        return rel_err(file, key, "expected an integer");
    double d = json_number_value(v);
    if (d != floor(d))
        return rel_err(file, key, "%g is not an integer", d);
    if (d < lo || d > hi)
        return rel_err(file, key, "%g is out of range %ld..%ld", d, lo, hi);
    *out = (int)d;
    return AI_OK;
}

static ai_status_t get_bool(const char *file, json_t *obj, const char *base, const char *key,
                            int *out)
{
    char path[200];
    snprintf(path, sizeof path, "%s%s%s", base, base[0] ? "." : "", key);
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return AI_OK;
    if (!json_is_boolean(v))
        return rel_err(file, path, "expected true or false");
    *out = json_is_true(v);
    return AI_OK;
}

static ai_status_t parse_causes(const char *file, json_t *arr, sim_reliability *r)
{
    if (!json_is_array(arr))
        return rel_err(file, "causes", "expected an array of {\"name\", \"share\", \"repair\", \"restart\"}");
    size_t n = json_array_size(arr);
    if (n < 1 || n > SIM_MAX_CAUSES)
        return rel_err(file, "causes", "%zu causes; want 1..%d", n, SIM_MAX_CAUSES);
    static const char *const keys[] = {"name", "share", "repair", "restart"};
    for (size_t i = 0; i < n; i++) {
        char base[64];
        snprintf(base, sizeof base, "causes[%zu]", i);
        json_t *c = json_array_get(arr, i);
        if (!json_is_object(c))
            return rel_err(file, base, "expected an object {\"name\", \"share\", \"repair\", \"restart\"}");
        ai_status_t st = check_keys(file, c, base, keys, 4);
        if (st != AI_OK)
            return st;
        json_t *name = json_object_get(c, "name");
        char path[80];
        snprintf(path, sizeof path, "%s.name", base);
        if (!name || !json_is_string(name) || json_string_length(name) < 1 ||
            json_string_length(name) >= SIM_CAUSE_NAME)
            return rel_err(file, path, "required string of 1-%d characters", SIM_CAUSE_NAME - 1);
        sim_cause *dst = &r->causes[i];
        snprintf(dst->name, sizeof dst->name, "%s", json_string_value(name));
        snprintf(path, sizeof path, "%s.share", base);
        if (!json_object_get(c, "share"))
            return rel_err(file, path, "required number is missing");
        dst->share = 0;
        if ((st = get_num(file, c, base, "share", 1e-12, 1e12, &dst->share)) != AI_OK)
            return st;
        dst->needs_repair = 1;
        if ((st = get_bool(file, c, base, "repair", &dst->needs_repair)) != AI_OK)
            return st;
        dst->restart = 0;
        if ((st = get_bool(file, c, base, "restart", &dst->restart)) != AI_OK)
            return st;
    }
    r->ncauses = (int)n;
    return AI_OK;
}

ai_status_t sim_reliability_from_json(json_t *doc, const char *path, sim_reliability *out)
{
    static const char *const keys[] = {
        "failures_per_node_day", "restart_s", "shrink_s", "grow_s", "join_s", "detect_s",
        "checkpoint_write_s", "storage_GBps", "checkpoint_async", "host_copy_GBps", "spares",
        "repair_h", "lemon_nodes", "lemon_factor", "causes", "warn_recall", "warn_lead_s",
        "warn_separation", "warn_window_s", "false_alarms_per_node_day", "warn_precision"};
    sim_reliability r;
    sim_reliability_defaults(&r);
    if (!json_is_object(doc))
        return rel_err(path, "", "a reliability spec is a JSON object");
    ai_status_t st;
    if ((st = check_keys(path, doc, "", keys, (int)AI_ARRAY_LEN(keys))) != AI_OK ||
        (st = get_num(path, doc, "", "failures_per_node_day", 0, 1000, &r.failures_per_node_day)) != AI_OK ||
        (st = get_num(path, doc, "", "restart_s", 0, 1e7, &r.restart_s)) != AI_OK ||
        (st = get_num(path, doc, "", "shrink_s", 0, 1e7, &r.shrink_s)) != AI_OK ||
        (st = get_num(path, doc, "", "grow_s", 0, 1e7, &r.grow_s)) != AI_OK ||
        (st = get_num(path, doc, "", "join_s", 0, 1e7, &r.join_s)) != AI_OK ||
        (st = get_num(path, doc, "", "detect_s", 0, 1e7, &r.detect_s)) != AI_OK ||
        (st = get_num(path, doc, "", "checkpoint_write_s", 0, 1e7, &r.checkpoint_write_s)) != AI_OK ||
        (st = get_num(path, doc, "", "storage_GBps", 1e-3, 1e9, &r.storage_GBps)) != AI_OK ||
        (st = get_bool(path, doc, "", "checkpoint_async", &r.checkpoint_async)) != AI_OK ||
        (st = get_num(path, doc, "", "host_copy_GBps", 1e-3, 1e7, &r.host_copy_GBps)) != AI_OK ||
        (st = get_int(path, doc, "spares", 0, 10000000, &r.spares)) != AI_OK ||
        (st = get_num(path, doc, "", "repair_h", 0, 1e6, &r.repair_h)) != AI_OK ||
        (st = get_int(path, doc, "lemon_nodes", 0, 10000000, &r.lemon_nodes)) != AI_OK ||
        (st = get_num(path, doc, "", "lemon_factor", 1, 1e6, &r.lemon_factor)) != AI_OK ||
        (st = get_num(path, doc, "", "warn_recall", 0, 1, &r.warn_recall)) != AI_OK ||
        (st = get_num(path, doc, "", "warn_lead_s", 1e-3, 1e7, &r.warn_lead_s)) != AI_OK ||
        (st = get_num(path, doc, "", "warn_separation", 1, 1000, &r.warn_separation)) != AI_OK ||
        (st = get_num(path, doc, "", "warn_window_s", 1, 1e7, &r.warn_window_s)) != AI_OK ||
        (st = get_num(path, doc, "", "false_alarms_per_node_day", 0, 1000,
                      &r.false_alarms_per_node_day)) != AI_OK ||
        (st = get_num(path, doc, "", "warn_precision", 1e-3, 1, &r.warn_precision)) != AI_OK)
        return st;
    json_t *causes = json_object_get(doc, "causes");
    if (causes && !json_is_null(causes) && (st = parse_causes(path, causes, &r)) != AI_OK)
        return st;
    *out = r;
    return AI_OK;
}

ai_status_t sim_reliability_load(const char *path, sim_reliability *out)
{
    json_t *doc;
    ai_status_t st = topo_json_load_file(path, &doc);
    if (st != AI_OK)
        return st;
    st = sim_reliability_from_json(doc, path, out);
    json_decref(doc);
    return st;
}
