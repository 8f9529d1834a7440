/*
 * Loading and validation of the cluster, model and training specs
 * (design/formats.md). Every check reports the first problem with the file
 * name and the JSON path of the offending value, so that a user with a
 * 500-line cluster file can go straight to it.
 *
 * Every key of every object must be one this loader reads (a misspelled
 * "overides" would otherwise drop the overrides silently): an unknown key
 * is refused with its path and the nearest known key. Every number has a
 * range, checked, and named in the error ("lo..hi"):
 *   cluster: node_groups[].count 1..1000000 (nodes in all at most
 *     1000000), devices_per_node 1..4096, devices in all at most
 *     TOPO_MAX_DEVICES; nic.count 1..64, nic.bw_Gbps and intra.bw_GBps
 *     0.001..1e7, latency_us 0..1e7; racks[].uplink_Gbps 0.001..1e9;
 *     device peak_tflops.<precision> 0..1e6, memory_GB 0.001..1e6,
 *     memory_bw_GBps 0.001..1e7 (the same in overrides[]), gemm_eff.<precision>
 *     0.01..1;
 *   model: layers 1..100000, hidden 1..10000000, heads and kv_heads
 *     1..100000, vocab 1..100000000, ffn_hidden 1..100000000;
 *   training: seq_len and global_batch 1..100000000, tokens 1..1e20.
 */
#include "topo/topo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Where we are in a document, for messages. */
typedef struct spec_ctx {
    const char *file;
} spec_ctx;

static ai_status_t spec_err(const spec_ctx *sc, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ai_status_t spec_err(const spec_ctx *sc, const char *path, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return util_fail(AI_ERR_INVALID, "%s: %s: %s", sc->file, path[0] ? path : "(root)", msg);
}

static void path_key(char *dst, size_t n, const char *base, const char *key)
{
    snprintf(dst, n, "%s%s%s", base, base[0] ? "." : "", key);
}

#define TOPO_MAX_DEVICES (1L << 24)
#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Refuse a key of obj that is not in known (NULL-terminated), naming its
 * path and the nearest known key. */
static ai_status_t check_keys(const spec_ctx *sc, json_t *obj, const char *base,
                              const char *const *known)
{
    int n = 0;
    while (known[n])
        n++;
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        int found = 0;
        for (int i = 0; i < n && !found; i++)
            found = !strcmp(key, known[i]);
        if (found)
            continue;
        char path[300], list[300] = "";
        path_key(path, sizeof path, base, key);
        for (int i = 0; i < n; i++) {
            size_t len = strlen(list);
            snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", known[i]);
        }
        const char *near = util_nearest_name(key, known, n);
        return spec_err(sc, path, "unknown key%s%s%s (known here: %s)",
                        near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "", list);
    }
    return AI_OK;
}

ai_status_t topo_json_load_file(const char *path, json_t **out)
{
    json_error_t err;
    json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!doc) {
        if (err.line < 0)
            return util_fail(AI_ERR_IO, "%s: %s", path, err.text);
        return util_fail(AI_ERR_PARSE, "%s:%d:%d: JSON syntax error: %s", path, err.line,
                         err.column, err.text);
    }
    *out = doc;
    return AI_OK;
}

/* ---- typed field access. `required` 0 leaves *out at the default. ---- */

static ai_status_t get_number(const spec_ctx *sc, json_t *obj, const char *base, const char *key,
                              int required, double lo, double hi, double *out)
{
    char path[256];
    path_key(path, sizeof path, base, key);
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (required)
            return spec_err(sc, path, "required number is missing");
        return AI_OK;
    }
    if (!json_is_number(v))
        return spec_err(sc, path, "expected a number");
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        return spec_err(sc, path, "%g is out of range %g..%g", d, lo, hi);
    *out = d;
    return AI_OK;
}

static ai_status_t get_int(const spec_ctx *sc, json_t *obj, const char *base, const char *key,
                           int required, long lo, long hi, int *out)
{
    char path[256];
    path_key(path, sizeof path, base, key);
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (required)
            return spec_err(sc, path, "required integer is missing");
        return AI_OK;
    }
    double d;
    if (json_is_integer(v))
        d = (double)json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)))
        d = json_real_value(v);
    else
        return spec_err(sc, path, "expected an integer");
    if (d < (double)lo || d > (double)hi)
        return spec_err(sc, path, "%.0f is out of range %ld..%ld", d, lo, hi);
    *out = (int)d;
    return AI_OK;
}

static ai_status_t get_bool(const spec_ctx *sc, json_t *obj, const char *base, const char *key,
                            int *out)
{
    char path[256];
    path_key(path, sizeof path, base, key);
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return AI_OK;
    if (!json_is_boolean(v))
        return spec_err(sc, path, "expected true or false");
    *out = json_is_true(v);
    return AI_OK;
}

static ai_status_t get_string(const spec_ctx *sc, json_t *obj, const char *base, const char *key,
                              int required, const char **out)
{
    char path[256];
    path_key(path, sizeof path, base, key);
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (required)
            return spec_err(sc, path, "required string is missing");
        return AI_OK;
    }
    if (!json_is_string(v))
        return spec_err(sc, path, "expected a string");
    *out = json_string_value(v);
    return AI_OK;
}

static ai_status_t get_name(const spec_ctx *sc, json_t *obj, const char *base, const char *key,
                            int required, char dst[TOPO_NAME_MAX])
{
    const char *s = NULL;
    ai_status_t st = get_string(sc, obj, base, key, required, &s);
    if (st != AI_OK || !s)
        return st;
    if (!*s || strlen(s) >= TOPO_NAME_MAX) {
        char path[256];
        path_key(path, sizeof path, base, key);
        return spec_err(sc, path, "name must have 1 to %d characters", TOPO_NAME_MAX - 1);
    }
    snprintf(dst, TOPO_NAME_MAX, "%s", s);
    return AI_OK;
}

static ai_status_t get_object(const spec_ctx *sc, json_t *obj, const char *base, const char *key,
                              int required, json_t **out)
{
    char path[256];
    path_key(path, sizeof path, base, key);
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = NULL;
        if (required)
            return spec_err(sc, path, "required object is missing");
        return AI_OK;
    }
    if (!json_is_object(v))
        return spec_err(sc, path, "expected an object");
    *out = v;
    return AI_OK;
}

/* ------------------------------------------------------------- device */

static ai_status_t parse_device(const spec_ctx *sc, json_t *v, const char *path, topo_device *out)
{
    topo_device d;
    memset(&d, 0, sizeof d);
    if (json_is_string(v)) {
        const topo_device *c = topo_catalog_find(json_string_value(v));
        if (!c) {
            char list[400] = "";
            for (size_t i = 0; i < topo_catalog_count(); i++) {
                strncat(list, topo_catalog_at(i)->name, sizeof list - strlen(list) - 3);
                if (i + 1 < topo_catalog_count())
                    strncat(list, ", ", sizeof list - strlen(list) - 1);
            }
            return util_fail(AI_ERR_NOTFOUND,
                             "%s: %s: unknown device '%s' (catalog: %s; or give an inline object)",
                             sc->file, path, json_string_value(v), list);
        }
        *out = *c;
        return AI_OK;
    }
    if (!json_is_object(v))
        return spec_err(sc, path, "expected a catalog name or a device object");
    const char *name = NULL;
    ai_status_t st = check_keys(sc, v, path, KEYS("name", "peak_tflops", "memory_GB", "memory_bw_GBps", "gemm_eff"));
    if (st == AI_OK)
        st = get_string(sc, v, path, "name", 0, &name);
    if (st != AI_OK)
        return st;
    /* A named inline device starts from its catalog entry, so users can
     * change one figure (a power-capped part) without repeating the rest. */
    const topo_device *base = topo_catalog_find(name);
    if (base)
        d = *base;
    if (name)
        snprintf(d.name, sizeof d.name, "%s", name);
    else
        snprintf(d.name, sizeof d.name, "custom");
    json_t *pk = NULL;
    if ((st = get_object(sc, v, path, "peak_tflops", !base, &pk)) != AI_OK)
        return st;
    if (pk) {
        char pp[256];
        path_key(pp, sizeof pp, path, "peak_tflops");
        const char *key;
        json_t *val;
        json_object_foreach(pk, key, val)
        {
            topo_precision p;
            if (topo_precision_parse(key, &p) != AI_OK) {
                char kp[300];
                path_key(kp, sizeof kp, pp, key);
                return spec_err(sc, kp, "unknown precision (bf16, fp16, fp8, fp32)");
            }
            if ((st = get_number(sc, pk, pp, key, 1, 0, 1e6, &d.peak_tflops[p])) != AI_OK)
                return st;
        }
        int any = 0;
        for (int i = 0; i < TOPO_PREC_COUNT; i++)
            any |= d.peak_tflops[i] > 0;
        if (!any)
            return spec_err(sc, pp, "at least one precision needs a peak above 0");
    }
    json_t *ge = NULL;
    if ((st = get_object(sc, v, path, "gemm_eff", 0, &ge)) != AI_OK)
        return st;
    if (ge) {
        char gp[256];
        path_key(gp, sizeof gp, path, "gemm_eff");
        const char *key;
        json_t *val;
        json_object_foreach(ge, key, val)
        {
            topo_precision p;
            if (topo_precision_parse(key, &p) != AI_OK) {
                char kp[300];
                path_key(kp, sizeof kp, gp, key);
                return spec_err(sc, kp, "unknown precision (bf16, fp16, fp8, fp32)");
            }
            if ((st = get_number(sc, ge, gp, key, 1, 0.01, 1, &d.gemm_eff[p])) != AI_OK)
                return st;
        }
    }
    if ((st = get_number(sc, v, path, "memory_GB", !base, 1e-3, 1e6, &d.memory_GB)) != AI_OK)
        return st;
    if ((st = get_number(sc, v, path, "memory_bw_GBps", !base, 1e-3, 1e7, &d.memory_bw_GBps)) != AI_OK)
        return st;
    *out = d;
    return AI_OK;
}

/* ------------------------------------------------------------ cluster */

void topo_cluster_free(topo_cluster *c)
{
    if (!c)
        return;
    free(c->path);
    free(c->groups);
    free(c->nodes);
    free(c->racks);
    free(c->pools);
    free(c);
}

/* "<group>-<index>" -> node number, -1 if no such node. */
static int cluster_node_find(const topo_cluster *c, const char *name)
{
    for (int g = 0; g < c->ngroups; g++) {
        size_t n = strlen(c->groups[g].name);
        if (strncmp(name, c->groups[g].name, n) != 0 || name[n] != '-')
            continue;
        long idx;
        ai_status_t st = util_parse_long(name + n + 1, &idx);
        util_clear_error();
        if (st == AI_OK && idx >= 0 && idx < c->groups[g].count)
            return c->groups[g].first_node + (int)idx;
    }
    return -1;
}

static ai_status_t parse_link(const spec_ctx *sc, json_t *obj, const char *path, int nic,
                              topo_node *n)
{
    ai_status_t st = check_keys(sc, obj, path,
                                nic ? KEYS("count", "bw_Gbps", "latency_us") : KEYS("bw_GBps", "latency_us"));
    if (st != AI_OK)
        return st;
    if (nic) {
        if ((st = get_int(sc, obj, path, "count", 0, 1, 64, &n->nic_count)) != AI_OK ||
            (st = get_number(sc, obj, path, "bw_Gbps", 0, 1e-3, 1e7, &n->nic_bw_Gbps)) != AI_OK ||
            (st = get_number(sc, obj, path, "latency_us", 0, 0, 1e7, &n->nic_latency_us)) != AI_OK)
            return st;
    } else {
        if ((st = get_number(sc, obj, path, "bw_GBps", 0, 1e-3, 1e7, &n->intra_bw_GBps)) != AI_OK ||
            (st = get_number(sc, obj, path, "latency_us", 0, 0, 1e7, &n->intra_latency_us)) != AI_OK)
            return st;
    }
    return AI_OK;
}

static int pool_same(const topo_pool *p, const topo_node *n, const topo_cluster *c, double net)
{
    return p->group == n->group && memcmp(&p->device, &n->device, sizeof p->device) == 0 &&
           p->intra_bw_GBps == n->intra_bw_GBps && p->intra_latency_us == n->intra_latency_us &&
           p->node_net_GBps == net && p->net_latency_us == n->nic_latency_us &&
           p->devices_per_node == c->groups[n->group].devices_per_node;
}

/* A node's `speed` (docs/formats.md): the testbed caps a cpu node's
 * processes at that fraction of a full-speed node's CPU time. Only the
 * testbed can slow a device, so other devices refuse it (a slower GPU is
 * described by its own figures). */
static ai_status_t parse_speed(const spec_ctx *sc, json_t *obj, const char *base, topo_node *n)
{
    char path[300];
    path_key(path, sizeof path, base, "speed");
    json_t *v = json_object_get(obj, "speed");
    if (!v || json_is_null(v))
        return AI_OK;
    if (!json_is_number(v))
        return spec_err(sc, path, "expected a number");
    double d = json_number_value(v);
    if (!isfinite(d) || d <= 0 || d > 1)
        return spec_err(sc, path, "%g is out of range (0, 1] (relative to a full-speed node)", d);
    if (strcasecmp(n->device.name, "cpu") != 0)
        return spec_err(sc, path, "speed is for cpu devices (the testbed), not '%s'", n->device.name);
    n->speed = d;
    return AI_OK;
}

static ai_status_t cluster_make_pools(topo_cluster *c)
{
    c->pools = calloc((size_t)c->nnodes, sizeof *c->pools);
    if (!c->pools)
        return util_fail(AI_ERR_NOMEM, "cluster pools");
    for (int i = 0; i < c->nnodes; i++) {
        topo_node *n = &c->nodes[i];
        double net = n->nic_count * n->nic_bw_Gbps / 8.0;
        if (n->rack >= 0) {
            /* A rack's uplink is shared by its nodes when they all talk
             * to the core at once (data-parallel reductions do). */
            const topo_rack *r = &c->racks[n->rack];
            net = AI_MIN(net, r->uplink_Gbps / 8.0 / r->nodes);
        }
        int p = 0;
        while (p < c->npools && !pool_same(&c->pools[p], n, c, net))
            p++;
        if (p == c->npools) {
            topo_pool *np = &c->pools[c->npools++];
            int k = 0;
            for (int q = 0; q < p; q++)
                k += c->pools[q].group == n->group;
            if (k == 0)
                snprintf(np->name, sizeof np->name, "%s", c->groups[n->group].name);
            else
                snprintf(np->name, sizeof np->name, "%s.%d", c->groups[n->group].name, k);
            np->group = n->group;
            np->devices_per_node = c->groups[n->group].devices_per_node;
            np->device = n->device;
            np->intra_bw_GBps = n->intra_bw_GBps;
            np->intra_latency_us = n->intra_latency_us;
            np->node_net_GBps = net;
            np->net_latency_us = n->nic_latency_us;
        }
        c->pools[p].nodes++;
        n->pool = p;
    }
    return AI_OK;
}

/* node_groups, first pass: each group's name, count and size (the nodes
 * are then allocated at once). */
static ai_status_t cluster_group_sizes(const spec_ctx *sc, topo_cluster *c, json_t *groups)
{
    char p[256];
    ai_status_t st;
    long total = 0, devices = 0;
    for (int g = 0; g < c->ngroups; g++) {
        json_t *gj = json_array_get(groups, (size_t)g);
        snprintf(p, sizeof p, "node_groups[%d]", g);
        if (!json_is_object(gj))
            return spec_err(sc, p, "expected an object");
        topo_group *gr = &c->groups[g];
        if ((st = check_keys(sc, gj, p, KEYS("name", "count", "devices_per_node", "device", "intra",
                                             "nic", "speed"))) != AI_OK ||
            (st = get_name(sc, gj, p, "name", 1, gr->name)) != AI_OK ||
            (st = get_int(sc, gj, p, "count", 1, 1, 1000000, &gr->count)) != AI_OK ||
            (st = get_int(sc, gj, p, "devices_per_node", 1, 1, 4096, &gr->devices_per_node)) != AI_OK)
            return st;
        for (int q = 0; q < g; q++)
            if (strcmp(c->groups[q].name, gr->name) == 0) {
                char np[300];
                path_key(np, sizeof np, p, "name");
                return spec_err(sc, np, "group name '%s' is also used by node_groups[%d]",
                                gr->name, q);
            }
        gr->first_node = (int)total;
        total += gr->count;
        if (total > 1000000)
            return spec_err(sc, p, "more than 1000000 nodes");
        devices += (long)gr->count * gr->devices_per_node;
        if (devices > TOPO_MAX_DEVICES)
            return spec_err(sc, p, "%d nodes x %d devices per node: more than %ld devices in the "
                                   "cluster", gr->count, gr->devices_per_node, TOPO_MAX_DEVICES);
    }
    c->nnodes = (int)total;
    return AI_OK;
}

/* node_groups, second pass: each group's nodes, from its device, links
 * and speed. */
static ai_status_t cluster_group_nodes(const spec_ctx *sc, topo_cluster *c, json_t *groups)
{
    char p[256];
    ai_status_t st;
    for (int g = 0; g < c->ngroups; g++) {
        json_t *gj = json_array_get(groups, (size_t)g);
        topo_group *gr = &c->groups[g];
        topo_node proto;
        memset(&proto, 0, sizeof proto);
        proto.group = g;
        proto.rack = -1;
        /* Defaults for latency follow the formats.md example (NVLink-class
         * 2 us, InfiniBand-class 5 us end to end including software). */
        proto.intra_latency_us = 2;
        proto.nic_latency_us = 5;
        proto.nic_count = 1;
        proto.speed = 1;
        snprintf(p, sizeof p, "node_groups[%d]", g);
        char dp[300];
        path_key(dp, sizeof dp, p, "device");
        json_t *dj = json_object_get(gj, "device");
        if (!dj)
            return spec_err(sc, dp, "required device (catalog name or object) is missing");
        if ((st = parse_device(sc, dj, dp, &proto.device)) != AI_OK ||
            (st = parse_speed(sc, gj, p, &proto)) != AI_OK)
            return st;
        json_t *intra = NULL, *nic = NULL;
        char ip[300], nicp[300];
        path_key(ip, sizeof ip, p, "intra");
        path_key(nicp, sizeof nicp, p, "nic");
        if ((st = get_object(sc, gj, p, "intra", gr->devices_per_node > 1, &intra)) != AI_OK)
            return st;
        if (intra) {
            if ((st = get_number(sc, intra, ip, "bw_GBps", 1, 1e-3, 1e7, &proto.intra_bw_GBps)) != AI_OK ||
                (st = parse_link(sc, intra, ip, 0, &proto)) != AI_OK)
                return st;
        } else {
            proto.intra_bw_GBps = 1e6; /* one device per node: never used */
        }
        if ((st = get_object(sc, gj, p, "nic", 1, &nic)) != AI_OK)
            return st;
        if ((st = get_number(sc, nic, nicp, "bw_Gbps", 1, 1e-3, 1e7, &proto.nic_bw_Gbps)) != AI_OK ||
            (st = parse_link(sc, nic, nicp, 1, &proto)) != AI_OK)
            return st;
        for (int i = 0; i < gr->count; i++) {
            c->nodes[gr->first_node + i] = proto;
            c->nodes[gr->first_node + i].index = i;
        }
        c->devices += gr->count * gr->devices_per_node;
    }
    return AI_OK;
}

/* racks: named nodes under an uplink, each node in one rack at most. */
static ai_status_t cluster_racks(const spec_ctx *sc, topo_cluster *c, json_t *racks)
{
    char p[256];
    ai_status_t st;
    if (!json_is_array(racks))
        return spec_err(sc, "racks", "expected an array");
    c->nracks = (int)json_array_size(racks);
    c->racks = calloc((size_t)c->nracks + 1, sizeof *c->racks);
    if (!c->racks)
        return util_fail(AI_ERR_NOMEM, "racks");
    for (int r = 0; r < c->nracks; r++) {
        json_t *rj = json_array_get(racks, (size_t)r);
        snprintf(p, sizeof p, "racks[%d]", r);
        if (!json_is_object(rj))
            return spec_err(sc, p, "expected an object");
        snprintf(c->racks[r].name, TOPO_NAME_MAX, "rack%d", r);
        if ((st = check_keys(sc, rj, p, KEYS("name", "uplink_Gbps", "nodes"))) != AI_OK ||
            (st = get_name(sc, rj, p, "name", 0, c->racks[r].name)) != AI_OK ||
            (st = get_number(sc, rj, p, "uplink_Gbps", 1, 1e-3, 1e9, &c->racks[r].uplink_Gbps)) != AI_OK)
            return st;
        json_t *nodes = json_object_get(rj, "nodes");
        char np[300];
        path_key(np, sizeof np, p, "nodes");
        if (!json_is_array(nodes))
            return spec_err(sc, np, "expected an array of node names");
        for (size_t k = 0; k < json_array_size(nodes); k++) {
            char ep[320];
            snprintf(ep, sizeof ep, "%s[%zu]", np, k);
            json_t *nj = json_array_get(nodes, k);
            if (!json_is_string(nj))
                return spec_err(sc, ep, "expected a node name such as \"%s-0\"", c->groups[0].name);
            int node = cluster_node_find(c, json_string_value(nj));
            if (node < 0)
                return spec_err(sc, ep, "no node named '%s' (nodes are <group>-<index>)",
                                json_string_value(nj));
            if (c->nodes[node].rack >= 0)
                return spec_err(sc, ep, "node '%s' is already in rack '%s'", json_string_value(nj),
                                c->racks[c->nodes[node].rack].name);
            c->nodes[node].rack = r;
            c->racks[r].nodes++;
        }
    }
    return AI_OK;
}

/* overrides: one node's links, device (an inline object without a name
 * changes figures of its own device) or speed. */
static ai_status_t cluster_overrides(const spec_ctx *sc, topo_cluster *c, json_t *ovs)
{
    char p[256];
    ai_status_t st;
    if (!json_is_array(ovs))
        return spec_err(sc, "overrides", "expected an array");
    for (size_t k = 0; k < json_array_size(ovs); k++) {
        json_t *oj = json_array_get(ovs, k);
        snprintf(p, sizeof p, "overrides[%zu]", k);
        if (!json_is_object(oj))
            return spec_err(sc, p, "expected an object");
        const char *nname = NULL;
        if ((st = check_keys(sc, oj, p, KEYS("node", "nic", "intra", "device", "speed"))) != AI_OK ||
            (st = get_string(sc, oj, p, "node", 1, &nname)) != AI_OK)
            return st;
        int node = cluster_node_find(c, nname);
        if (node < 0) {
            char np[300];
            path_key(np, sizeof np, p, "node");
            return spec_err(sc, np, "no node named '%s' (nodes are <group>-<index>)", nname);
        }
        topo_node *n = &c->nodes[node];
        json_t *sub = NULL;
        char sp[300];
        path_key(sp, sizeof sp, p, "nic");
        if ((st = get_object(sc, oj, p, "nic", 0, &sub)) != AI_OK)
            return st;
        if (sub && (st = parse_link(sc, sub, sp, 1, n)) != AI_OK)
            return st;
        path_key(sp, sizeof sp, p, "intra");
        if ((st = get_object(sc, oj, p, "intra", 0, &sub)) != AI_OK)
            return st;
        if (sub && (st = parse_link(sc, sub, sp, 0, n)) != AI_OK)
            return st;
        json_t *dj = json_object_get(oj, "device");
        if (dj) {
            path_key(sp, sizeof sp, p, "device");
            /* An inline override without a name changes figures of
             * the node's own device. */
            if (json_is_object(dj) && !json_object_get(dj, "name")) {
                json_t *copy = json_deep_copy(dj);
                if (!copy) {
                    return util_fail(AI_ERR_NOMEM, "override");
                }
                json_object_set_new(copy, "name", json_string(n->device.name));
                topo_device base = n->device;
                const topo_device *cat = topo_catalog_find(n->device.name);
                if (cat) {
                    st = parse_device(sc, copy, sp, &n->device);
                } else {
                    /* Custom device: apply the given fields only. */
                    json_t *v;
                    n->device = base;
                    st = check_keys(sc, copy, sp, KEYS("name", "memory_GB", "memory_bw_GBps"));
                    if (st == AI_OK && (v = json_object_get(copy, "memory_GB")))
                        st = get_number(sc, copy, sp, "memory_GB", 1, 1e-3, 1e6, &n->device.memory_GB);
                    if (st == AI_OK && (v = json_object_get(copy, "memory_bw_GBps")))
                        st = get_number(sc, copy, sp, "memory_bw_GBps", 1, 1e-3, 1e7,
                                        &n->device.memory_bw_GBps);
                }
                json_decref(copy);
                if (st != AI_OK)
                    return st;
            } else if ((st = parse_device(sc, dj, sp, &n->device)) != AI_OK)
                return st;
        }
        if ((st = parse_speed(sc, oj, p, n)) != AI_OK)
            return st;
    }
    return AI_OK;
}

ai_status_t topo_cluster_from_json(json_t *doc, const char *path, topo_cluster **out)
{
    spec_ctx sc = {path};
    ai_status_t st;
    if (!json_is_object(doc))
        return spec_err(&sc, "", "a cluster is a JSON object");
    topo_cluster *c = calloc(1, sizeof *c);
    if (!c)
        return util_fail(AI_ERR_NOMEM, "cluster");
    c->path = strdup(path);
    if (!c->path) {
        st = util_fail(AI_ERR_NOMEM, "cluster");
        goto err;
    }
    snprintf(c->name, sizeof c->name, "cluster");
    if ((st = get_name(&sc, doc, "", "name", 0, c->name)) != AI_OK)
        goto err;

    json_t *groups = json_object_get(doc, "node_groups");
    if (!json_is_array(groups) || json_array_size(groups) == 0) {
        st = spec_err(&sc, "node_groups", "needs a non-empty array of node groups");
        goto err;
    }
    /* after node_groups: another kind of spec is named as such */
    if ((st = check_keys(&sc, doc, "", KEYS("name", "node_groups", "racks", "overrides"))) != AI_OK)
        goto err;
    c->ngroups = (int)json_array_size(groups);
    c->groups = calloc((size_t)c->ngroups, sizeof *c->groups);
    if (!c->groups) {
        st = util_fail(AI_ERR_NOMEM, "cluster groups");
        goto err;
    }
    if ((st = cluster_group_sizes(&sc, c, groups)) != AI_OK)
        goto err;
    c->nodes = calloc((size_t)c->nnodes, sizeof *c->nodes);
    if (!c->nodes) {
        st = util_fail(AI_ERR_NOMEM, "cluster nodes");
        goto err;
    }
    if ((st = cluster_group_nodes(&sc, c, groups)) != AI_OK)
        goto err;

    json_t *racks = json_object_get(doc, "racks");
    if (racks && !json_is_null(racks) && (st = cluster_racks(&sc, c, racks)) != AI_OK)
        goto err;
    json_t *ovs = json_object_get(doc, "overrides");
    if (ovs && !json_is_null(ovs) && (st = cluster_overrides(&sc, c, ovs)) != AI_OK)
        goto err;
    /* A node at speed s computes s times as fast: its peaks scale, so
     * nodes of different speeds fall into different pools. */
    for (int i = 0; i < c->nnodes; i++)
        for (int k = 0; k < TOPO_PREC_COUNT; k++)
            c->nodes[i].device.peak_tflops[k] *= c->nodes[i].speed;
    if ((st = cluster_make_pools(c)) != AI_OK)
        goto err;
    *out = c;
    return AI_OK;
err:
    topo_cluster_free(c);
    return st;
}

ai_status_t topo_cluster_load(const char *path, topo_cluster **out)
{
    json_t *doc;
    ai_status_t st = topo_json_load_file(path, &doc);
    if (st != AI_OK)
        return st;
    st = topo_cluster_from_json(doc, path, out);
    json_decref(doc);
    return st;
}

/* -------------------------------------------------------------- model */

ai_status_t topo_model_from_json(json_t *doc, const char *path, topo_model *out)
{
    spec_ctx sc = {path};
    ai_status_t st;
    topo_model m;
    memset(&m, 0, sizeof m);
    if (!json_is_object(doc))
        return spec_err(&sc, "", "a model is a JSON object");
    snprintf(m.name, sizeof m.name, "model");
    if ((st = check_keys(&sc, doc, "", KEYS("name", "layers", "hidden", "heads", "vocab", "kv_heads",
                                            "ffn_hidden", "tied_embeddings", "ffn_kind"))) != AI_OK ||
        (st = get_name(&sc, doc, "", "name", 0, m.name)) != AI_OK ||
        (st = get_int(&sc, doc, "", "layers", 1, 1, 100000, &m.layers)) != AI_OK ||
        (st = get_int(&sc, doc, "", "hidden", 1, 1, 10000000, &m.hidden)) != AI_OK ||
        (st = get_int(&sc, doc, "", "heads", 1, 1, 100000, &m.heads)) != AI_OK ||
        (st = get_int(&sc, doc, "", "vocab", 1, 1, 100000000, &m.vocab)) != AI_OK)
        return st;
    m.kv_heads = m.heads;
    m.ffn_hidden = 4 * m.hidden;
    if ((st = get_int(&sc, doc, "", "kv_heads", 0, 1, 100000, &m.kv_heads)) != AI_OK ||
        (st = get_int(&sc, doc, "", "ffn_hidden", 0, 1, 100000000, &m.ffn_hidden)) != AI_OK ||
        (st = get_bool(&sc, doc, "", "tied_embeddings", &m.tied_embeddings)) != AI_OK)
        return st;
    if (m.hidden % m.heads)
        return spec_err(&sc, "hidden", "%d is not a multiple of heads (%d)", m.hidden, m.heads);
    if (m.kv_heads > m.heads || m.heads % m.kv_heads)
        return spec_err(&sc, "kv_heads", "%d must divide heads (%d)", m.kv_heads, m.heads);
    const char *kind = NULL;
    if ((st = get_string(&sc, doc, "", "ffn_kind", 0, &kind)) != AI_OK)
        return st;
    m.ffn_kind = TOPO_FFN_GELU;
    if (kind) {
        if (strcasecmp(kind, "gelu") == 0)
            m.ffn_kind = TOPO_FFN_GELU;
        else if (strcasecmp(kind, "swiglu") == 0)
            m.ffn_kind = TOPO_FFN_SWIGLU;
        else
            return spec_err(&sc, "ffn_kind", "'%s' is not gelu or swiglu", kind);
    }
    *out = m;
    return AI_OK;
}

ai_status_t topo_model_load(const char *path, topo_model *out)
{
    json_t *doc;
    ai_status_t st = topo_json_load_file(path, &doc);
    if (st != AI_OK)
        return st;
    st = topo_model_from_json(doc, path, out);
    json_decref(doc);
    return st;
}

/* ----------------------------------------------------------- training */

ai_status_t topo_training_from_json(json_t *doc, const char *path, topo_training *out)
{
    spec_ctx sc = {path};
    ai_status_t st;
    topo_training t;
    memset(&t, 0, sizeof t);
    if (!json_is_object(doc))
        return spec_err(&sc, "", "a training spec is a JSON object");
    t.precision = TOPO_BF16;
    t.optimizer = TOPO_OPT_ADAM;
    t.flash_attention = 1;
    t.grad_fp32 = 1;
    if ((st = check_keys(&sc, doc, "", KEYS("seq_len", "global_batch", "tokens", "flash_attention",
                                            "tp_comm_overlap", "grad_reduce_in_fp32", "precision",
                                            "optimizer"))) != AI_OK ||
        (st = get_int(&sc, doc, "", "seq_len", 1, 1, 100000000, &t.seq_len)) != AI_OK ||
        (st = get_int(&sc, doc, "", "global_batch", 1, 1, 100000000, &t.global_batch)) != AI_OK ||
        (st = get_number(&sc, doc, "", "tokens", 0, 1, 1e20, &t.tokens)) != AI_OK ||
        (st = get_bool(&sc, doc, "", "flash_attention", &t.flash_attention)) != AI_OK ||
        (st = get_bool(&sc, doc, "", "tp_comm_overlap", &t.tp_comm_overlap)) != AI_OK ||
        (st = get_bool(&sc, doc, "", "grad_reduce_in_fp32", &t.grad_fp32)) != AI_OK)
        return st;
    const char *s = NULL;
    if ((st = get_string(&sc, doc, "", "precision", 0, &s)) != AI_OK)
        return st;
    if (s && topo_precision_parse(s, &t.precision) != AI_OK)
        return spec_err(&sc, "precision", "'%s' is not bf16, fp16, fp8 or fp32", s);
    s = NULL;
    if ((st = get_string(&sc, doc, "", "optimizer", 0, &s)) != AI_OK)
        return st;
    if (s) {
        if (strcasecmp(s, "adam") == 0 || strcasecmp(s, "adamw") == 0)
            t.optimizer = TOPO_OPT_ADAM;
        else if (strcasecmp(s, "sgd") == 0)
            t.optimizer = TOPO_OPT_SGD;
        else
            return spec_err(&sc, "optimizer", "'%s' is not adam, adamw or sgd", s);
    }
    *out = t;
    return AI_OK;
}

ai_status_t topo_training_load(const char *path, topo_training *out)
{
    json_t *doc;
    ai_status_t st = topo_json_load_file(path, &doc);
    if (st != AI_OK)
        return st;
    st = topo_training_from_json(doc, path, out);
    json_decref(doc);
    return st;
}

/* ------------------------------------------------------------- counts */

double topo_model_layer_params(const topo_model *m)
{
    double h = m->hidden, f = m->ffn_hidden;
    double g = (double)m->kv_heads / m->heads;
    double mats = m->ffn_kind == TOPO_FFN_SWIGLU ? 3 : 2;
    double attn = h * h * (1 + 2 * g) + h * (1 + 2 * g) /* QKV + bias */ + h * h + h /* proj */;
    double ffn = mats * h * f + (mats - 1) * f + h;
    return attn + ffn + 4 * h /* two layernorms */;
}

double topo_model_params(const topo_model *m)
{
    double emb = (double)m->vocab * m->hidden;
    return m->layers * topo_model_layer_params(m) + emb * (m->tied_embeddings ? 1 : 2) +
           2.0 * m->hidden;
}
