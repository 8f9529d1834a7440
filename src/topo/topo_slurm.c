/*
 * Slurm's description of a cluster, to and from the cluster format.
 *
 * Slurm knows the nodes (NodeName= lines: names, CPUs, GPUs by Gres) and,
 * with topology/tree, the switches (topology.conf). It does not know link
 * rates or which catalog device a GPU is, so those come from the caller
 * (ai_slurm_source). Leaf switches (those with Nodes=) become racks;
 * higher switches are taken as a non-blocking core, as the cluster format
 * has one level of racks.
 */
#include "topo/topo.h"
#include "topo/topo_slurm.h"

#include <ctype.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------- hostlists */

typedef struct strvec {
    char **v;
    int n, cap;
} strvec;

static ai_status_t vec_push(strvec *s, const char *str, size_t len)
{
    if (s->n >= TOPO_HOSTLIST_MAX)
        return util_fail(AI_ERR_INVALID, "more than %d names", TOPO_HOSTLIST_MAX);
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        char **v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v)
            return util_fail(AI_ERR_NOMEM, "hostlist");
        s->v = v;
        s->cap = cap;
    }
    char *c = strndup(str, len);
    if (!c)
        return util_fail(AI_ERR_NOMEM, "hostlist");
    s->v[s->n++] = c;
    return AI_OK;
}

void topo_hostlist_free(char **names, int count)
{
    for (int i = 0; names && i < count; i++)
        free(names[i]);
    free(names);
}

/* One name with bracket groups, item[0..len): the first group is expanded
 * into each of its numbers and the rest recursively. */
static ai_status_t expand_item(const char *item, size_t len, strvec *out)
{
    const char *open = memchr(item, '[', len);
    const char *close = memchr(item, ']', len);
    if (!open) {
        if (close)
            return util_fail(AI_ERR_INVALID, "']' without '['");
        return vec_push(out, item, len);
    }
    if (!close || close < open)
        return util_fail(AI_ERR_INVALID, "'[' without ']'");
    const char *in = open + 1;
    if (memchr(in, '[', (size_t)(close - in)))
        return util_fail(AI_ERR_INVALID, "brackets inside brackets");
    if (close == in)
        return util_fail(AI_ERR_INVALID, "empty brackets");
    if (in[0] == ',' || close[-1] == ',' || memmem(in, (size_t)(close - in), ",,", 2))
        return util_fail(AI_ERR_INVALID, "an empty number in '%.*s'", (int)(close - open + 1), open);
    size_t pre = (size_t)(open - item), rest = len - (size_t)(close + 1 - item);
    char buf[512];
    while (in < close) {
        const char *end = memchr(in, ',', (size_t)(close - in));
        if (!end)
            end = close;
        const char *dash = memchr(in, '-', (size_t)(end - in));
        const char *lo_end = dash ? dash : end;
        const char *hi = dash ? dash + 1 : in;
        size_t wlo = (size_t)(lo_end - in), whi = (size_t)(end - hi);
        if (wlo == 0 || whi == 0 || wlo > 18 || whi > 18)
            return util_fail(AI_ERR_INVALID, "'%.*s' is not a number or a range LO-HI",
                             (int)(end - in), in);
        for (const char *q = in; q < end; q++)
            if (q != dash && !isdigit((unsigned char)*q))
                return util_fail(AI_ERR_INVALID, "'%.*s' is not a number or a range LO-HI",
                                 (int)(end - in), in);
        unsigned long long lo = strtoull(in, NULL, 10), hv = strtoull(hi, NULL, 10);
        if (hv < lo)
            return util_fail(AI_ERR_INVALID, "range '%.*s' runs backwards", (int)(end - in), in);
        if (hv - lo >= TOPO_HOSTLIST_MAX)
            return util_fail(AI_ERR_INVALID, "range '%.*s' has more than %d names",
                             (int)(end - in), in, TOPO_HOSTLIST_MAX);
        for (unsigned long long v = lo;; v++) {
            int w = snprintf(buf, sizeof buf, "%.*s%0*llu%.*s", (int)pre, item, (int)wlo, v,
                             (int)rest, close + 1);
            if (w < 0 || (size_t)w >= sizeof buf)
                return util_fail(AI_ERR_INVALID, "a name longer than %zu characters", sizeof buf - 1);
            ai_status_t st = expand_item(buf, (size_t)w, out);
            if (st != AI_OK)
                return st;
            if (v == hv)
                break;
        }
        in = end + 1;
    }
    return AI_OK;
}

ai_status_t topo_hostlist_expand(const char *expr, char ***names, int *count)
{
    strvec out = {0};
    *names = NULL;
    *count = 0;
    ai_status_t st = AI_OK;
    if (!expr || !*expr) {
        st = util_fail(AI_ERR_INVALID, "empty hostlist");
        goto err;
    }
    for (const char *q = expr; *q; q++)
        if (isspace((unsigned char)*q) || *q == '=' || *q == '"') {
            st = util_fail(AI_ERR_INVALID, "hostlist '%s': '%c' has no place in a node name", expr, *q);
            goto err;
        }
    const char *item = expr;
    for (;;) {
        const char *q = item;
        int depth = 0;
        while (*q && (depth || *q != ',')) {
            depth += *q == '[' ? 1 : *q == ']' ? -1 : 0;
            q++;
        }
        if (q == item) {
            st = util_fail(AI_ERR_INVALID, "hostlist '%s': an empty name", expr);
            goto err;
        }
        if ((st = expand_item(item, (size_t)(q - item), &out)) != AI_OK) {
            util_fail_prefix(st, "hostlist '%s'", expr);
            goto err;
        }
        if (!*q)
            break;
        item = q + 1;
    }
    *names = out.v;
    *count = out.n;
    return AI_OK;
err:
    topo_hostlist_free(out.v, out.n);
    return st;
}

/* name = prefix digits: the length of the prefix (the whole name when it
 * ends in no digit). */
static size_t digits_at(const char *name)
{
    size_t n = strlen(name);
    while (n > 0 && isdigit((unsigned char)name[n - 1]))
        n--;
    return n;
}

typedef struct sbuf {
    char *s;
    size_t n, cap;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...)
{
    if (b->cap == (size_t)-1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (w < 0 || b->n + (size_t)w + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (w >= 0 && b->n + (size_t)w + 1 > cap)
            cap *= 2;
        char *s = w < 0 ? NULL : realloc(b->s, cap);
        if (!s) {
            free(b->s);
            b->s = NULL;
            b->cap = (size_t)-1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    b->n += (size_t)w;
}

static char *sb_take(sbuf *b)
{
    if (b->cap == (size_t)-1)
        return NULL;
    if (!b->s)
        return strdup("");
    return b->s;
}

/* Does digits d (length w) print as number v at the padding that a range
 * starting with a w0-digit number gives? */
static int same_width(const char *d, size_t w, size_t w0)
{
    return w == w0 || (w > w0 && d[0] != '0');
}

char *topo_hostlist_compress(char *const *names, int count)
{
    sbuf b = {0};
    int i = 0;
    while (i < count) {
        const char *a = names[i];
        size_t pre = digits_at(a), w0 = strlen(a) - pre;
        if (i)
            sb_add(&b, ",");
        if (w0 == 0 || w0 > 18) {
            sb_add(&b, "%s", a);
            i++;
            continue;
        }
        /* names i..j-1 share the prefix and each is a number that a bracket
         * list of ranges reproduces */
        int j = i;
        int brackets = 0;
        sbuf in = {0};
        while (j < count) {
            const char *s = names[j];
            size_t p = digits_at(s), w = strlen(s) - p;
            if (p != pre || strncmp(s, a, pre) != 0 || w == 0 || w > 18)
                break;
            /* a run from names[j]: v, v+1, ... all padded like names[j] */
            unsigned long long v = strtoull(s + p, NULL, 10);
            int k = j + 1;
            while (k < count) {
                const char *t = names[k];
                size_t tp = digits_at(t), tw = strlen(t) - tp;
                if (tp != pre || strncmp(t, a, pre) != 0 || tw == 0 || tw > 18 ||
                    strtoull(t + tp, NULL, 10) != v + (unsigned long long)(k - j) ||
                    !same_width(t + tp, tw, w))
                    break;
                k++;
            }
            if (brackets)
                sb_add(&in, ",");
            if (k - j == 1)
                sb_add(&in, "%s", s + p);
            else
                sb_add(&in, "%s-%s", s + p, names[k - 1] + pre);
            brackets += k - j;
            j = k;
        }
        char *inner = sb_take(&in);
        if (!inner) {
            free(b.s);
            return NULL;
        }
        if (brackets == 1)
            sb_add(&b, "%s", a);
        else
            sb_add(&b, "%.*s[%s]", (int)pre, a, inner);
        free(inner);
        i = j;
    }
    return sb_take(&b);
}

/* ---------------------------------------------------- key=value lines */

#define MAX_KV 128

typedef struct kvline {
    int n;
    char *key[MAX_KV], *val[MAX_KV];
} kvline;

/* Split one line (modified in place) into Key=Value words; words without
 * '=' (the free text scontrol prints, "OS=Linux 6.1 #1 SMP") are skipped. */
static void kv_split(char *line, int conf, kvline *kv)
{
    kv->n = 0;
    if (conf) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
    }
    char *save = NULL;
    for (char *w = strtok_r(line, " \t\r\n", &save); w && kv->n < MAX_KV;
         w = strtok_r(NULL, " \t\r\n", &save)) {
        char *eq = strchr(w, '=');
        if (!eq || eq == w)
            continue;
        *eq = '\0';
        kv->key[kv->n] = w;
        kv->val[kv->n] = eq + 1;
        kv->n++;
    }
}

static const char *kv_get(const kvline *kv, const char *key)
{
    for (int i = 0; i < kv->n; i++)
        if (!strcasecmp(kv->key[i], key))
            return kv->val[i];
    return NULL;
}

/* -------------------------------------------------------------- nodes */

typedef struct snode {
    char *name;
    int cpus, gpus;
    char gpu_type[TOPO_NAME_MAX];
    int line;            /* where it was defined (0: topology only) */
    int leaf;            /* index of its leaf switch, -1: none */
    int selected;
    /* resolved */
    char device[TOPO_NAME_MAX];
    int dpn;
    int group;
    long num;            /* the name's trailing number, -1: none */
} snode;

typedef struct sleaf {
    char name[TOPO_NAME_MAX];
    double linkspeed;    /* 0: not given */
    int line;
    int nodes;           /* selected nodes in it */
} sleaf;

typedef struct spart {
    char *name, *nodes;
    int line;
} spart;

typedef struct slurm_ctx {
    const ai_slurm_source *src;
    snode *nodes;
    int nnodes, capnodes;
    sleaf *leaves;
    int nleaves;
    spart *parts;
    int nparts;
    int *index;          /* open addressing on node names: node + 1, 0 empty */
    size_t index_cap;    /* a power of two, more than twice nnodes */
} slurm_ctx;

static void ctx_free(slurm_ctx *c)
{
    for (int i = 0; i < c->nnodes; i++)
        free(c->nodes[i].name);
    free(c->nodes);
    free(c->leaves);
    for (int i = 0; i < c->nparts; i++) {
        free(c->parts[i].name);
        free(c->parts[i].nodes);
    }
    free(c->parts);
    free(c->index);
}

static size_t name_slot(const slurm_ctx *c, const char *name)
{
    size_t mask = c->index_cap - 1, h = (size_t)util_hash64(name, strlen(name), 0) & mask;
    while (c->index[h] && strcmp(c->nodes[c->index[h] - 1].name, name) != 0)
        h = (h + 1) & mask;
    return h;
}

static int node_find(const slurm_ctx *c, const char *name)
{
    if (!c->index_cap)
        return -1;
    return c->index[name_slot(c, name)] - 1;
}

static ai_status_t node_add(slurm_ctx *c, const char *name, int line, int *idx)
{
    if (c->nnodes == c->capnodes) {
        int cap = c->capnodes ? c->capnodes * 2 : 64;
        snode *v = realloc(c->nodes, (size_t)cap * sizeof *v);
        if (!v)
            return util_fail(AI_ERR_NOMEM, "slurm nodes");
        c->nodes = v;
        c->capnodes = cap;
    }
    snode *n = &c->nodes[c->nnodes];
    memset(n, 0, sizeof *n);
    n->name = strdup(name);
    if (!n->name)
        return util_fail(AI_ERR_NOMEM, "slurm nodes");
    n->line = line;
    n->leaf = -1;
    n->num = -1;
    *idx = c->nnodes++;
    if ((size_t)c->nnodes * 2 >= c->index_cap) {
        size_t cap = c->index_cap ? c->index_cap * 2 : 256;
        int *ix = calloc(cap, sizeof *ix);
        if (!ix)
            return util_fail(AI_ERR_NOMEM, "slurm nodes");
        free(c->index);
        c->index = ix;
        c->index_cap = cap;
        for (int i = 0; i < c->nnodes; i++)
            c->index[name_slot(c, c->nodes[i].name)] = i + 1;
    } else {
        c->index[name_slot(c, name)] = *idx + 1;
    }
    return AI_OK;
}

/* Gres=gpu:h100:8,gpu:h100:2(S:0),mps:100 -> 10 GPUs of type h100. */
static ai_status_t parse_gres(const char *label, int line, const char *value, int *gpus,
                              char type[TOPO_NAME_MAX])
{
    *gpus = 0;
    type[0] = '\0';
    if (!strcmp(value, "(null)") || !*value)
        return AI_OK;
    char buf[512];
    size_t o = 0;
    int depth = 0;
    for (const char *q = value; *q && o + 1 < sizeof buf; q++) {
        depth += *q == '(' ? 1 : *q == ')' ? -1 : 0;
        if (!depth && *q != ')')
            buf[o++] = *q;
    }
    buf[o] = '\0';
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *parts[4];
        int np = 0;
        char *s2 = NULL;
        for (char *t = strtok_r(item, ":", &s2); t && np < 4; t = strtok_r(NULL, ":", &s2))
            parts[np++] = t;
        if (np == 0 || strcasecmp(parts[0], "gpu") != 0)
            continue;
        long count = 1;
        const char *ty = "";
        if (np >= 2) {
            const char *last = parts[np - 1];
            if (isdigit((unsigned char)last[0])) {
                if (util_parse_long(last, &count) != AI_OK || count < 0 || count > 4096)
                    return util_fail(AI_ERR_INVALID, "%s:%d: Gres=%s: GPU count '%s' is not in 0..4096",
                                     label, line, value, last);
                if (np >= 3)
                    ty = parts[1];
            } else {
                ty = parts[1];
            }
        }
        if (*ty && type[0] && strcasecmp(ty, type) != 0)
            return util_fail(AI_ERR_INVALID, "%s:%d: Gres=%s: GPUs of two types (%s, %s) on one node "
                                           "(not in the cluster format)", label, line, value, type, ty);
        if (*ty)
            snprintf(type, TOPO_NAME_MAX, "%s", ty);
        *gpus += (int)count;
    }
    return AI_OK;
}

static ai_status_t parse_int_field(const char *label, int line, const char *key, const char *v,
                                   int *out)
{
    long x;
    if (util_parse_long(v, &x) != AI_OK || x < 0 || x > 1000000) {
        util_clear_error();
        return util_fail(AI_ERR_INVALID, "%s:%d: %s=%s is not a count", label, line, key, v);
    }
    *out = (int)x;
    return AI_OK;
}

/* NodeName= and PartitionName= lines (slurm.conf, or scontrol -o output). */
static ai_status_t read_nodes(slurm_ctx *c, const char *text, const char *label)
{
    /* scontrol's free text has '#' in it ("OS=Linux ... #1 SMP") */
    int conf = strncmp(label, "scontrol", 8) != 0;
    int def_cpus = 0, def_gpus = 0, line = 0;
    char def_type[TOPO_NAME_MAX] = "";
    ai_status_t st = AI_OK;
    const char *p = text;
    char *buf = NULL;
    while (*p && st == AI_OK) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        line++;
        free(buf);
        buf = strndup(p, len);
        p = e ? e + 1 : p + len;
        if (!buf)
            return util_fail(AI_ERR_NOMEM, "slurm.conf");
        kvline kv;
        kv_split(buf, conf, &kv);
        if (kv.n == 0)
            continue;
        if (!strcasecmp(kv.key[0], "PartitionName")) {
            const char *nodes = kv_get(&kv, "Nodes");
            if (!strcasecmp(kv.val[0], "DEFAULT"))
                continue;
            spart *v = realloc(c->parts, (size_t)(c->nparts + 1) * sizeof *v);
            if (!v) {
                st = util_fail(AI_ERR_NOMEM, "partitions");
                break;
            }
            c->parts = v;
            spart *pt = &c->parts[c->nparts++];
            pt->name = strdup(kv.val[0]);
            pt->nodes = nodes && strcmp(nodes, "(null)") ? strdup(nodes) : NULL;
            pt->line = line;
            if (!pt->name) {
                st = util_fail(AI_ERR_NOMEM, "partitions");
                break;
            }
            continue;
        }
        if (strcasecmp(kv.key[0], "NodeName") != 0)
            continue;
        int cpus = def_cpus, gpus = def_gpus;
        char type[TOPO_NAME_MAX];
        snprintf(type, sizeof type, "%s", def_type);
        const char *v;
        if ((v = kv_get(&kv, "CPUs")) || (v = kv_get(&kv, "CPUTot")) || (v = kv_get(&kv, "Procs")))
            if ((st = parse_int_field(label, line, "CPUs", v, &cpus)) != AI_OK)
                break;
        if ((v = kv_get(&kv, "Gres")) && (st = parse_gres(label, line, v, &gpus, type)) != AI_OK)
            break;
        if (!strcasecmp(kv.val[0], "DEFAULT")) {
            def_cpus = cpus;
            def_gpus = gpus;
            snprintf(def_type, sizeof def_type, "%s", type);
            continue;
        }
        char **names;
        int nn;
        if ((st = topo_hostlist_expand(kv.val[0], &names, &nn)) != AI_OK) {
            util_fail_prefix(st, "%s:%d: NodeName", label, line);
            break;
        }
        for (int i = 0; i < nn && st == AI_OK; i++) {
            int at = node_find(c, names[i]), idx;
            if (at >= 0) {
                st = util_fail(AI_ERR_INVALID, "%s:%d: node '%s' is defined again (first at line %d)",
                               label, line, names[i], c->nodes[at].line);
                break;
            }
            if ((st = node_add(c, names[i], line, &idx)) != AI_OK)
                break;
            c->nodes[idx].cpus = cpus;
            c->nodes[idx].gpus = gpus;
            snprintf(c->nodes[idx].gpu_type, TOPO_NAME_MAX, "%s", type);
        }
        topo_hostlist_free(names, nn);
    }
    free(buf);
    return st;
}

/* SwitchName= lines: leaf switches (Nodes=) become racks. With no node
 * lines read before, the leaves' nodes are the cluster's nodes. */
static ai_status_t read_topology(slurm_ctx *c, const char *text, const char *label, int define)
{
    int line = 0;
    ai_status_t st = AI_OK;
    const char *p = text;
    char *buf = NULL;
    while (*p && st == AI_OK) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        line++;
        free(buf);
        buf = strndup(p, len);
        p = e ? e + 1 : p + len;
        if (!buf)
            return util_fail(AI_ERR_NOMEM, "topology");
        kvline kv;
        kv_split(buf, 1, &kv);
        if (kv.n == 0)
            continue;
        if (strcasecmp(kv.key[0], "SwitchName") != 0) {
            st = util_fail(AI_ERR_INVALID, "%s:%d: expected SwitchName=..., not '%s='", label, line,
                           kv.key[0]);
            break;
        }
        const char *nodes = kv_get(&kv, "Nodes"), *speed = kv_get(&kv, "LinkSpeed");
        const char *below = kv_get(&kv, "Switches");
        /* scontrol lists an upper switch's nodes too: only leaves are racks */
        if (!nodes || !strcmp(nodes, "(null)") || (below && strcmp(below, "(null)")))
            continue;
        if (strlen(kv.val[0]) >= TOPO_NAME_MAX || !kv.val[0][0]) {
            st = util_fail(AI_ERR_INVALID, "%s:%d: switch name '%s' is not 1 to %d characters", label,
                           line, kv.val[0], TOPO_NAME_MAX - 1);
            break;
        }
        sleaf *v = realloc(c->leaves, (size_t)(c->nleaves + 1) * sizeof *v);
        if (!v) {
            st = util_fail(AI_ERR_NOMEM, "topology");
            break;
        }
        c->leaves = v;
        sleaf *lf = &c->leaves[c->nleaves];
        memset(lf, 0, sizeof *lf);
        snprintf(lf->name, sizeof lf->name, "%s", kv.val[0]);
        lf->line = line;
        for (int k = 0; k < c->nleaves; k++)
            if (!strcmp(c->leaves[k].name, lf->name)) {
                st = util_fail(AI_ERR_INVALID, "%s:%d: switch '%s' is named again (first at line %d)",
                               label, line, lf->name, c->leaves[k].line);
                goto out;
            }
        if (speed) {
            double s;
            if (util_parse_double(speed, &s) != AI_OK || s < 0) {
                util_clear_error();
                st = util_fail(AI_ERR_INVALID, "%s:%d: LinkSpeed=%s is not a number", label, line, speed);
                break;
            }
            lf->linkspeed = s;
        }
        int me = c->nleaves++;
        char **names;
        int nn;
        if ((st = topo_hostlist_expand(nodes, &names, &nn)) != AI_OK) {
            util_fail_prefix(st, "%s:%d: Nodes", label, line);
            break;
        }
        for (int i = 0; i < nn && st == AI_OK; i++) {
            int at = node_find(c, names[i]);
            if (at < 0 && define)
                st = node_add(c, names[i], 0, &at);
            else if (at < 0)
                st = util_fail(AI_ERR_INVALID, "%s:%d: node '%s' has no NodeName line", label, line,
                               names[i]);
            if (st != AI_OK)
                break;
            if (c->nodes[at].leaf >= 0 && c->nodes[at].leaf != me)
                st = util_fail(AI_ERR_INVALID, "%s:%d: node '%s' is also under switch '%s' (line %d)",
                               label, line, names[i], c->leaves[c->nodes[at].leaf].name,
                               c->leaves[c->nodes[at].leaf].line);
            else
                c->nodes[at].leaf = me;
        }
        topo_hostlist_free(names, nn);
    }
out:
    free(buf);
    return st;
}

static ai_status_t select_list(slurm_ctx *c, const char *expr, const char *what, int mark)
{
    if (!strcasecmp(expr, "ALL")) {
        for (int i = 0; i < c->nnodes; i++)
            c->nodes[i].selected |= mark;
        return AI_OK;
    }
    char **names;
    int nn;
    ai_status_t st = topo_hostlist_expand(expr, &names, &nn);
    if (st != AI_OK)
        return util_fail_prefix(st, "%s", what);
    for (int i = 0; i < nn; i++) {
        int at = node_find(c, names[i]);
        if (at < 0) {
            st = util_fail(AI_ERR_INVALID, "%s: node '%s' is not a known node", what, names[i]);
            break;
        }
        c->nodes[at].selected |= mark;
    }
    topo_hostlist_free(names, nn);
    return st;
}

/* --device PATTERN=KIND[:N] */
typedef struct overlay {
    char *pattern;
    int glob;
    char **names;
    int nnames;
    char kind[TOPO_NAME_MAX];
    int count;           /* 0: from Slurm */
} overlay;

static ai_status_t overlay_parse(const char *arg, const char *from, overlay *o)
{
    memset(o, 0, sizeof *o);
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1])
        return util_fail(AI_ERR_INVALID, "%s '%s': expected PATTERN=KIND[:N] (e.g. 'gpu[001-016]=H100:8')", from, arg);
    o->pattern = strndup(arg, (size_t)(eq - arg));
    if (!o->pattern)
        return util_fail(AI_ERR_NOMEM, "--device");
    char kind[TOPO_NAME_MAX];
    snprintf(kind, sizeof kind, "%s", eq + 1);
    char *colon = strrchr(kind, ':');
    if (colon) {
        long n;
        *colon = '\0';
        if (util_parse_long(colon + 1, &n) != AI_OK || n < 1 || n > 4096) {
            util_clear_error();
            return util_fail(AI_ERR_INVALID, "%s '%s': the device count '%s' is not in 1..4096", from, arg,
                             colon + 1);
        }
        o->count = (int)n;
    }
    const topo_device *d = topo_catalog_find(kind);
    if (!d) {
        char list[1024] = "";
        for (size_t i = 0; i < topo_catalog_count(); i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                     topo_catalog_at(i)->name);
        return util_fail(AI_ERR_NOTFOUND, "%s '%s': unknown device '%s' (known: %s)", from, arg, kind, list);
    }
    snprintf(o->kind, sizeof o->kind, "%s", d->name);
    o->glob = strpbrk(o->pattern, "*?") != NULL;
    if (!o->glob) {
        ai_status_t st = topo_hostlist_expand(o->pattern, &o->names, &o->nnames);
        if (st != AI_OK)
            return util_fail_prefix(st, "%s '%s'", from, arg);
    }
    return AI_OK;
}

static int overlay_match(const overlay *o, const char *name)
{
    if (o->glob)
        return fnmatch(o->pattern, name, 0) == 0;
    for (int i = 0; i < o->nnames; i++)
        if (!strcmp(o->names[i], name))
            return 1;
    return 0;
}

static int by_number(const void *a, const void *b)
{
    const snode *x = *(snode *const *)a, *y = *(snode *const *)b;
    if (x->num != y->num)
        return x->num < y->num ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The group name for a node name: its text before the trailing number. */
static void name_prefix(const char *name, char out[TOPO_NAME_MAX])
{
    size_t n = digits_at(name);
    while (n > 0 && strchr("-_.", name[n - 1]))
        n--;
    if (n == 0)
        snprintf(out, TOPO_NAME_MAX, "node");
    else
        snprintf(out, TOPO_NAME_MAX, "%.*s", (int)AI_MIN(n, (size_t)TOPO_NAME_MAX - 8), name);
}

/* Far more than a cluster has kinds of node; the cluster loader checks
 * group names pairwise. */
#define SLURM_MAX_GROUPS 1024

typedef struct sgroup {
    char name[TOPO_NAME_MAX], prefix[TOPO_NAME_MAX];
    char device[TOPO_NAME_MAX];
    int dpn, count;
    int nth;             /* of the groups with this prefix, from 1 */
} sgroup;

/* The node groups as they form: each selected node joins the group of
 * its (name prefix, device, count), found by hashing. */
typedef struct grouping {
    sgroup *gs;
    int ng;
    size_t cap;          /* of both tables, a power of two */
    int *gix;            /* by (prefix, device, count), open addressing: group + 1, 0 empty */
    int *pix;            /* the latest group of each prefix, the same way */
} grouping;

/* A node's device and its count: the last --device that names it wins,
 * else its Gres GPU type and count, else its CPUs when it is a CPU node.
 * A node none of these describe stops the import with the --device line
 * that would describe it. */
static ai_status_t node_device(const ai_slurm_source *src, const overlay *ov, snode *n)
{
    const overlay *hit = NULL;
    for (int k = 0; k < src->ndevices; k++)
        if (overlay_match(&ov[k], n->name))
            hit = &ov[k];
    const topo_device *d = NULL;
    if (hit)
        d = topo_catalog_find(hit->kind);
    else if (n->gpus > 0 && n->gpu_type[0])
        d = topo_catalog_find(n->gpu_type);
    if (!d) {
        char hint[TOPO_NAME_MAX];
        name_prefix(n->name, hint);
        if (n->gpus > 0 && n->gpu_type[0])
            return util_fail(AI_ERR_NOTFOUND, "node '%s': GPU type '%s' is not a catalog device: "
                             "name it with --device '%s=KIND'", n->name, n->gpu_type, n->name);
        return util_fail(AI_ERR_INVALID, "node '%s' has %s: say what it holds with --device "
                         "'%s=KIND[:N]' (a pattern such as '%s*=H100:8'; for CPU ranks 'cpu')",
                         n->name, n->gpus ? "GPUs of no type" : "no GPUs (Gres=gpu:TYPE:N)",
                         n->name, hint);
    }
    snprintf(n->device, sizeof n->device, "%s", d->name);
    int is_cpu = !strcasecmp(d->name, "cpu");
    n->dpn = hit && hit->count ? hit->count : n->gpus ? n->gpus : is_cpu ? n->cpus : 0;
    if (n->dpn < 1 || n->dpn > 4096)
        return util_fail(AI_ERR_INVALID, "node '%s': %d devices (%s): give the count with --device "
                         "'%s=%s:N'", n->name, n->dpn, is_cpu ? "CPUs" : "Gres GPUs", n->name, d->name);
    return AI_OK;
}

/* A new group for the prefix, device and count: the first group of a
 * prefix is named after it, later ones prefix_2, prefix_3...; a prefix
 * never ends in a digit, so these cannot meet another prefix's plain
 * name. */
static int group_new(grouping *gr, const char *pre, const snode *n)
{
    sgroup *ngp = &gr->gs[gr->ng++];
    snprintf(ngp->prefix, sizeof ngp->prefix, "%s", pre);
    snprintf(ngp->device, sizeof ngp->device, "%s", n->device);
    ngp->dpn = n->dpn;
    size_t ph = (size_t)util_hash64(pre, strlen(pre), 1) & (gr->cap - 1);
    while (gr->pix[ph] && strcmp(gr->gs[gr->pix[ph] - 1].prefix, pre) != 0)
        ph = (ph + 1) & (gr->cap - 1);
    int same = gr->pix[ph] ? gr->gs[gr->pix[ph] - 1].nth : 0;
    gr->pix[ph] = gr->ng;
    ngp->nth = same + 1;
    if (same)
        snprintf(ngp->name, sizeof ngp->name, "%s_%d", pre, same + 1);
    else
        snprintf(ngp->name, sizeof ngp->name, "%s", pre);
    return gr->ng - 1;
}

/* The node joins its group (a new one when none matches yet) and keeps
 * its trailing number, by which the group's nodes are ordered later. */
static ai_status_t node_group(grouping *gr, snode *n)
{
    size_t p = digits_at(n->name);
    n->num = n->name[p] ? strtol(n->name + p, NULL, 10) : -1;
    char pre[TOPO_NAME_MAX];
    name_prefix(n->name, pre);
    char key[3 * TOPO_NAME_MAX];
    int klen = snprintf(key, sizeof key, "%s/%s/%d", pre, n->device, n->dpn);
    size_t h = (size_t)util_hash64(key, (size_t)klen, 0) & (gr->cap - 1);
    int g = -1;
    while (gr->gix[h]) {
        const sgroup *q = &gr->gs[gr->gix[h] - 1];
        if (!strcmp(q->prefix, pre) && !strcmp(q->device, n->device) && q->dpn == n->dpn) {
            g = gr->gix[h] - 1;
            break;
        }
        h = (h + 1) & (gr->cap - 1);
    }
    if (g < 0 && gr->ng == SLURM_MAX_GROUPS)
        return util_fail(AI_ERR_INVALID, "node '%s' would start a node group beyond %d (nodes group by "
                         "the name without its trailing number, device and count)", n->name,
                         SLURM_MAX_GROUPS);
    if (g < 0) {
        gr->gix[h] = gr->ng + 1;
        g = group_new(gr, pre, n);
    }
    n->group = g;
    gr->gs[g].count++;
    return AI_OK;
}

/* The node_groups array; each group's nodes are renumbered from 0 in the
 * order of their numbers (gpu001 -> gpu-0), the names racks then use. */
static json_t *groups_json(slurm_ctx *c, const grouping *gr, snode **order)
{
    const ai_slurm_source *src = c->src;
    json_t *groups = json_array();
    for (int g = 0; g < gr->ng; g++) {
        const sgroup *sg = &gr->gs[g];
        json_t *gj = json_object();
        json_object_set_new(gj, "name", json_string(sg->name));
        json_object_set_new(gj, "count", json_integer(sg->count));
        json_object_set_new(gj, "device", json_string(sg->device));
        json_object_set_new(gj, "devices_per_node", json_integer(sg->dpn));
        if (sg->dpn > 1)
            json_object_set_new(gj, "intra", json_pack("{s:f}", "bw_GBps", src->intra_GBps));
        json_object_set_new(gj, "nic", json_pack("{s:i,s:f}", "count", src->nics > 0 ? src->nics : 1,
                                                 "bw_Gbps", src->nic_Gbps));
        json_array_append_new(groups, gj);
        int k = 0;
        for (int i = 0; i < c->nnodes; i++)
            if (c->nodes[i].selected && c->nodes[i].group == g)
                order[k++] = &c->nodes[i];
        qsort(order, (size_t)k, sizeof *order, by_number);
        for (int i = 0; i < k; i++)
            order[i]->num = i; /* now the index in the group */
    }
    return groups;
}

/* The racks array: one per leaf switch with selected nodes, its uplink
 * given, or the switch's LinkSpeed, or non-blocking (the sum of its
 * NICs). */
static json_t *racks_json(const slurm_ctx *c, const sgroup *gs)
{
    const ai_slurm_source *src = c->src;
    json_t *racks = json_array();
    for (int r = 0; r < c->nleaves; r++) {
        json_t *names = json_array();
        double nic_sum = 0;
        for (int i = 0; i < c->nnodes; i++) {
            const snode *n = &c->nodes[i];
            if (!n->selected || n->leaf != r)
                continue;
            char nm[TOPO_NAME_MAX + 16];
            snprintf(nm, sizeof nm, "%s-%ld", gs[n->group].name, n->num);
            json_array_append_new(names, json_string(nm));
            nic_sum += (src->nics > 0 ? src->nics : 1) * src->nic_Gbps;
        }
        if (json_array_size(names) == 0) {
            json_decref(names);
            continue;
        }
        double up = src->uplink_Gbps > 0 ? src->uplink_Gbps
                    : src->linkspeed_mbps && c->leaves[r].linkspeed > 0 ? c->leaves[r].linkspeed / 1000
                    : nic_sum;
        json_t *rj = json_object();
        json_object_set_new(rj, "name", json_string(c->leaves[r].name));
        json_object_set_new(rj, "nodes", names);
        json_object_set_new(rj, "uplink_Gbps", json_real(up));
        json_array_append_new(racks, rj);
    }
    return racks;
}

static ai_status_t build(slurm_ctx *c, json_t **out)
{
    const ai_slurm_source *src = c->src;
    ai_status_t st = AI_OK;
    overlay *ov = calloc((size_t)AI_MAX(src->ndevices, 1), sizeof *ov);
    snode **order = calloc((size_t)AI_MAX(c->nnodes, 1), sizeof *order);
    grouping gr = {.cap = 256};
    while (gr.cap <= (size_t)c->nnodes * 2)
        gr.cap *= 2;
    gr.gs = calloc((size_t)AI_MAX(c->nnodes, 1), sizeof *gr.gs);
    gr.gix = calloc(gr.cap, sizeof *gr.gix);
    gr.pix = calloc(gr.cap, sizeof *gr.pix);
    json_t *doc = NULL;
    if (!ov || !gr.gs || !order || !gr.gix || !gr.pix) {
        st = util_fail(AI_ERR_NOMEM, "slurm import");
        goto out;
    }
    for (int k = 0; k < src->ndevices; k++)
        if ((st = overlay_parse(src->devices[k], k < src->ndevices_file ? src->devices_file : "--device",
                                &ov[k])) != AI_OK)
            goto out;
    if (!(src->nic_Gbps > 0)) {
        st = util_fail(AI_ERR_INVALID, "Slurm does not know the network: give the NIC rate (--nic-gbps G, "
                                     "per NIC)");
        goto out;
    }
    int nsel = 0;
    for (int i = 0; i < c->nnodes; i++) {
        snode *n = &c->nodes[i];
        if (!n->selected)
            continue;
        nsel++;
        if ((st = node_device(src, ov, n)) != AI_OK || (st = node_group(&gr, n)) != AI_OK)
            goto out;
    }
    if (nsel == 0) {
        st = util_fail(AI_ERR_INVALID, "no nodes selected");
        goto out;
    }
    for (int g = 0; g < gr.ng; g++)
        if (gr.gs[g].dpn > 1 && !(src->intra_GBps > 0)) {
            st = util_fail(AI_ERR_INVALID, "nodes such as group '%s' have %d devices: give the link "
                           "between them (--intra-GBps B, per device and direction)", gr.gs[g].name,
                           gr.gs[g].dpn);
            goto out;
        }

    doc = json_object();
    json_object_set_new(doc, "name", json_string(src->name && *src->name ? src->name : "slurm"));
    json_object_set_new(doc, "node_groups", groups_json(c, &gr, order));
    json_t *racks = racks_json(c, gr.gs);
    if (json_array_size(racks))
        json_object_set_new(doc, "racks", racks);
    else
        json_decref(racks);
    /* the loader is the judge of what was made */
    topo_cluster *check = NULL;
    if ((st = topo_cluster_from_json(doc, "cluster from Slurm", &check)) != AI_OK)
        goto out;
    topo_cluster_free(check);
    *out = doc;
    doc = NULL;
out:
    json_decref(doc);
    for (int k = 0; ov && k < src->ndevices; k++) {
        free(ov[k].pattern);
        topo_hostlist_free(ov[k].names, ov[k].nnames);
    }
    free(ov);
    free(gr.gs);
    free(order);
    free(gr.gix);
    free(gr.pix);
    return st;
}

ai_status_t ai_slurm_cluster_json(const ai_slurm_source *src, char **out)
{
    *out = NULL;
    slurm_ctx c = {.src = src};
    ai_status_t st = AI_OK;
    const char *nl = src->nodes_label ? src->nodes_label : "slurm.conf";
    const char *tl = src->topology_label ? src->topology_label : "topology.conf";
    if (!src->nodes_text && !src->topology_text)
        return util_fail(AI_ERR_INVALID, "neither node lines (slurm.conf) nor a topology.conf");
    if (src->nodes_text && (st = read_nodes(&c, src->nodes_text, nl)) != AI_OK)
        goto out;
    if (src->nodes_text && c.nnodes == 0) {
        st = util_fail(AI_ERR_INVALID, "%s: no NodeName= line", nl);
        goto out;
    }
    if (src->topology_text && (st = read_topology(&c, src->topology_text, tl, !src->nodes_text)) != AI_OK)
        goto out;
    if (c.nnodes == 0) {
        st = util_fail(AI_ERR_INVALID, "%s: no switch with Nodes=", tl);
        goto out;
    }
    int marks = 0;
    if (src->partition) {
        int p;
        for (p = 0; p < c.nparts; p++)
            if (!strcmp(c.parts[p].name, src->partition))
                break;
        if (p == c.nparts) {
            char list[512] = "";
            for (int q = 0; q < c.nparts; q++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", q ? ", " : "",
                         c.parts[q].name);
            st = util_fail(AI_ERR_NOTFOUND, "%s: no partition '%s' (there %s: %s)", nl, src->partition,
                           c.nparts == 1 ? "is" : "are", c.nparts ? list : "none");
            goto out;
        }
        if (!c.parts[p].nodes) {
            st = util_fail(AI_ERR_INVALID, "%s:%d: partition '%s' has no nodes", nl, c.parts[p].line,
                           src->partition);
            goto out;
        }
        char what[300];
        snprintf(what, sizeof what, "%s:%d: partition '%s'", nl, c.parts[p].line, src->partition);
        if ((st = select_list(&c, c.parts[p].nodes, what, 1)) != AI_OK)
            goto out;
        marks |= 1;
    }
    if (src->nodelist) {
        if ((st = select_list(&c, src->nodelist, "node list", 2)) != AI_OK)
            goto out;
        marks |= 2;
    }
    for (int i = 0; i < c.nnodes; i++)
        c.nodes[i].selected = c.nodes[i].selected == marks;
    json_t *doc = NULL;
    if ((st = build(&c, &doc)) != AI_OK)
        goto out;
    *out = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    json_decref(doc);
    if (!*out)
        st = util_fail(AI_ERR_NOMEM, "cluster JSON");
out:
    ctx_free(&c);
    return st;
}

/* ------------------------------------------------------------- export */

/* Can this name stand in a topology.conf word (and a hostlist)? */
static int slurm_word(const char *name)
{
    for (const char *q = name; *q; q++)
        if (!isgraph((unsigned char)*q) || strchr("=,[]#\"'", *q))
            return 0;
    return *name != 0;
}

ai_status_t ai_slurm_topology_conf(const char *spec_path, char **out)
{
    *out = NULL;
    topo_cluster *c;
    ai_status_t st = topo_cluster_load(spec_path, &c);
    if (st != AI_OK)
        return st;
    for (int g = 0; g < c->ngroups; g++)
        if (!slurm_word(c->groups[g].name)) {
            st = util_fail(AI_ERR_INVALID, "%s: node_groups[%d].name '%s': a Slurm node name has no "
                           "spaces, '=', ',', brackets, '#' or quotes", spec_path, g, c->groups[g].name);
            topo_cluster_free(c);
            return st;
        }
    for (int r = 0; r < c->nracks; r++)
        if (!slurm_word(c->racks[r].name)) {
            st = util_fail(AI_ERR_INVALID, "%s: racks[%d].name '%s': a Slurm switch name has no "
                           "spaces, '=', ',', brackets, '#' or quotes", spec_path, r, c->racks[r].name);
            topo_cluster_free(c);
            return st;
        }
    char **names = calloc((size_t)c->nnodes + 1, sizeof *names);
    char **leaves = calloc((size_t)c->nracks + 2, sizeof *leaves);
    sbuf b = {0};
    int nleaves = 0;
    if (!names || !leaves) {
        st = util_fail(AI_ERR_NOMEM, "topology");
        goto out;
    }
    sb_add(&b, "# topology.conf for cluster '%s' (autoinfra cluster to-slurm-topology)\n"
               "# A leaf switch per rack; LinkSpeed is the rack's uplink in Mbit/s.\n", c->name);
    char core[TOPO_NAME_MAX] = "core";
    for (int r = -1; r < c->nracks; r++) {
        int k = 0;
        for (int i = 0; i < c->nnodes; i++)
            if (c->nodes[i].rack == r) {
                const topo_node *n = &c->nodes[i];
                char nm[TOPO_NAME_MAX * 2];
                snprintf(nm, sizeof nm, "%s-%d", c->groups[n->group].name, n->index);
                if (!(names[k++] = strdup(nm))) {
                    st = util_fail(AI_ERR_NOMEM, "topology");
                    goto out;
                }
            }
        char *list = k ? topo_hostlist_compress(names, k) : NULL;
        for (int i = 0; i < k; i++) {
            free(names[i]);
            names[i] = NULL;
        }
        if (k && !list) {
            st = util_fail(AI_ERR_NOMEM, "topology");
            goto out;
        }
        if (k && r < 0) {
            /* nodes on the core: a leaf without LinkSpeed (non-blocking) */
            for (int q = 0; q < c->nracks; q++)
                if (!strcmp(c->racks[q].name, core))
                    snprintf(core, sizeof core, "core%d", q);
            sb_add(&b, "SwitchName=%s Nodes=%s\n", core, list);
            leaves[nleaves++] = strdup(core);
        } else if (k) {
            sb_add(&b, "SwitchName=%s Nodes=%s LinkSpeed=%.0f\n", c->racks[r].name, list,
                   c->racks[r].uplink_Gbps * 1000);
            leaves[nleaves++] = strdup(c->racks[r].name);
        }
        free(list);
        if (nleaves && !leaves[nleaves - 1]) {
            st = util_fail(AI_ERR_NOMEM, "topology");
            goto out;
        }
    }
    if (nleaves > 1) {
        char top[TOPO_NAME_MAX + 8] = "top";
        for (int tries = 0;; tries++) {
            int clash = 0;
            for (int q = 0; q < nleaves; q++)
                clash |= !strcmp(leaves[q], top);
            if (!clash)
                break;
            snprintf(top, sizeof top, "top%d", tries);
        }
        char *list = topo_hostlist_compress(leaves, nleaves);
        if (!list) {
            st = util_fail(AI_ERR_NOMEM, "topology");
            goto out;
        }
        sb_add(&b, "SwitchName=%s Switches=%s\n", top, list);
        free(list);
    }
    *out = sb_take(&b);
    b.s = NULL;
    if (!*out)
        st = util_fail(AI_ERR_NOMEM, "topology");
out:
    free(b.s);
    free(names);
    for (int i = 0; leaves && i < nleaves; i++)
        free(leaves[i]);
    free(leaves);
    topo_cluster_free(c);
    return st;
}
