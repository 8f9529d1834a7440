/*
 * `autoinfra kb`: what the learner knows (docs/exports.md).
 *
 *   autoinfra kb show [--fingerprint FP | --ranks N] [--all] [--json]
 *   autoinfra kb log [--fingerprint FP | --ranks N] [--json]
 *   autoinfra kb export FILE [--fingerprint FP | --ranks N]
 *   autoinfra kb import FILE
 *   autoinfra kb export-ompi FILE [--fingerprint FP | --ranks N]
 *   autoinfra kb export-mpich FILE [--fingerprint FP | --ranks N]
 *   autoinfra kb path
 *
 * Every subcommand takes --kb PATH; without it AUTOINFRA_KB, else the
 * default path (ai_kb_default_path). The exports to other stacks hold one
 * fingerprint: they name the one they use, and never guess between
 * several (an error lists them).
 */
#include "autoinfra.h"
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Each subcommand's flags, described in its --help: every "--x" of args
 * has a line in flags (test_kb_export checks it). */
#define FLAG_FP                                                                                   \
    "  --fingerprint FP  the fingerprint (16 hex digits) to use; `kb show` lists them\n"
#define FLAG_RANKS_ONE                                                                            \
    "  --ranks N         the fingerprint of communicators of N ranks: an error\n"                 \
    "                    listing them when the KB holds several\n"
#define FLAG_RANKS_ALL "  --ranks N         only the fingerprints of communicators of N ranks\n"
#define FLAG_JSON "  --json            print the same as one JSON object\n"
#define FLAG_ONE                                                                                  \
    "Without --fingerprint or --ranks: the KB's only fingerprint; when it holds\n"                \
    "several, an error lists them (ranks, hosts, samples) and nothing is written.\n"              \
    "The fingerprint used is named on stderr.\n"

static const struct {
    const char *name, *args, *help, *flags;
} subs[] = {
    {"show", "[--fingerprint FP | --ranks N] [--all] [--json]",
     "per fingerprint (communicator: ranks, hosts, description) the best arm of\n"
     "every collective and size bucket: algorithm, chunk, channels, mean time,\n"
     "confidence that it is the fastest, samples, and how many arms were tried.",
     FLAG_FP FLAG_RANKS_ALL
     "  --all             every measured arm of each bucket, fastest first: its\n"
     "                    samples, mean time and the spread (sd) of that mean\n" FLAG_JSON},
    {"log", "[--fingerprint FP | --ranks N] [--json]",
     "what `auto` chose, oldest first: when a bucket settled on an arm, switched\n"
     "to another, or started warm from the knowledge base; the arm's mean time\n"
     "and confidence then, and the runner-up (the next measured arm) with how\n"
     "much slower it was expected.",
     FLAG_FP FLAG_RANKS_ALL FLAG_JSON},
    {"export", "FILE [--fingerprint FP | --ranks N]",
     "write the knowledge base (or, with --fingerprint or --ranks, one\n"
     "fingerprint) as JSON (format \"autoinfra-kb\", version 1) to FILE.",
     FLAG_FP FLAG_RANKS_ONE},
    {"import", "FILE", "merge a JSON export into the knowledge base (created if missing).", ""},
    {"export-ompi", "FILE [--fingerprint FP | --ranks N]",
     "write an Open MPI 4.1 coll/tuned dynamic rules file for one fingerprint:\n"
     "use it with\n"
     "  mpirun --mca coll_tuned_use_dynamic_rules 1 \\\n"
     "         --mca coll_tuned_dynamic_rules_filename FILE ...\n" FLAG_ONE,
     FLAG_FP FLAG_RANKS_ONE},
    {"export-mpich", "FILE [--fingerprint FP | --ranks N]",
     "write an MPICH 4.0 collective selection file for one fingerprint: use it\n"
     "with MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE=FILE (and, to bypass the\n"
     "ch4 device's own selection, MPIR_CVAR_DEVICE_COLLECTIVES=none).\n" FLAG_ONE,
     FLAG_FP FLAG_RANKS_ONE},
    {"path", "", "print the knowledge base path in use.", ""},
};

static void usage(FILE *out)
{
    fprintf(out, "usage:");
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        fprintf(out, "%s autoinfra kb %s%s%s [--kb PATH]\n", i ? "      " : "", subs[i].name,
                *subs[i].args ? " " : "", subs[i].args);
    fprintf(out, "\n--kb PATH selects the knowledge base; default: $AUTOINFRA_KB, else\n"
                 "$XDG_CACHE_HOME/autoinfra/kb.sqlite, else ~/.cache/autoinfra/kb.sqlite.\n"
                 "'autoinfra kb SUBCOMMAND --help' describes each subcommand.\n");
}

static void sub_usage(FILE *out, int k)
{
    fprintf(out,
            "usage: autoinfra kb %s%s%s [--kb PATH]\n\n%s\n\n%s"
            "  --kb PATH         the knowledge base; default: $AUTOINFRA_KB, else\n"
            "                    $XDG_CACHE_HOME/autoinfra/kb.sqlite, else\n"
            "                    ~/.cache/autoinfra/kb.sqlite\n"
            "  --help            this text\n",
            subs[k].name, *subs[k].args ? " " : "", subs[k].args, subs[k].help, subs[k].flags);
}

/* Parsed command line of one subcommand. */
typedef struct {
    const char *file;
    const char *fingerprint;
    const char *kb;
    int ranks; /* 0: any */
    int json, all;
} kb_args;

static int parse(int k, int argc, char **argv, kb_args *a)
{
    const char *sub = subs[k].name;
    int want_file = strstr(subs[k].args, "FILE") != NULL;
    int want_fp = strstr(subs[k].args, "--fingerprint") != NULL;
    memset(a, 0, sizeof *a);
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int m;
        if (!strcmp(argv[i], "--json") && strstr(subs[k].args, "--json")) {
            a->json = 1;
        } else if (!strcmp(argv[i], "--all") && strstr(subs[k].args, "--all")) {
            a->all = 1;
        } else if (want_fp && (m = cli_match_opt(argc, argv, &i, "--ranks", &v)) != 0) {
            if (m < 0 || cli_parse_int(v, 1, 1 << 20, &a->ranks)) {
                fprintf(stderr, "autoinfra kb %s: --ranks needs a number of ranks >= 1\n", sub);
                return 2;
            }
        } else if ((m = cli_match_opt(argc, argv, &i, "--kb", &v)) != 0) {
            if (m < 0 || !*v) {
                fprintf(stderr, "autoinfra kb %s: --kb needs a path\n", sub);
                return 2;
            }
            a->kb = v;
        } else if (want_fp && (m = cli_match_opt(argc, argv, &i, "--fingerprint", &v)) != 0) {
            if (m < 0 || !*v) {
                fprintf(stderr, "autoinfra kb %s: --fingerprint needs a value (16 hex digits)\n",
                        sub);
                return 2;
            }
            a->fingerprint = v;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "autoinfra kb %s: unknown option '%s'\n", sub, argv[i]);
            sub_usage(stderr, k);
            return 2;
        } else if (want_file && !a->file) {
            a->file = argv[i];
        } else {
            fprintf(stderr, "autoinfra kb %s: unexpected argument '%s'\n", sub, argv[i]);
            sub_usage(stderr, k);
            return 2;
        }
    }
    if (want_file && !a->file) {
        fprintf(stderr, "autoinfra kb %s: missing FILE\n", sub);
        sub_usage(stderr, k);
        return 2;
    }
    if (a->fingerprint && strlen(a->fingerprint) != 16) {
        fprintf(stderr, "autoinfra kb %s: --fingerprint '%s' is not 16 hex digits\n", sub,
                a->fingerprint);
        return 2;
    }
    if (a->fingerprint && a->ranks) {
        fprintf(stderr, "autoinfra kb %s: --fingerprint and --ranks both choose the fingerprint: "
                        "give one\n", sub);
        return 2;
    }
    return 0;
}

static int open_kb(const char *path, int readonly, ai_kb **kb)
{
    if (ai_kb_open(path, readonly, kb) == AI_OK)
        return 0;
    fprintf(stderr, "autoinfra kb: cannot open the knowledge base %s: %s\n", path,
            ai_last_error());
    return 1;
}

/* ----------------------------------------------------------- fingerprints */

/* What the KB holds per fingerprint, for choosing one and naming it. */
typedef struct {
    char id[17];
    int nranks, nhosts;
    char desc[128];
    long samples;
} fp_info;

typedef struct {
    fp_info *f;
    int n, cap, nomem;
} fp_list;

static int fp_visit(const ai_kb_arm *a, void *arg)
{
    fp_list *l = arg;
    if (l->n == 0 || strcmp(l->f[l->n - 1].id, a->fingerprint)) {
        if (l->n == l->cap) {
            int cap = l->cap ? 2 * l->cap : 8;
            fp_info *nf = realloc(l->f, (size_t)cap * sizeof *nf);
            if (!nf) {
                l->nomem = 1;
                return 1;
            }
            l->f = nf;
            l->cap = cap;
        }
        fp_info *f = &l->f[l->n++];
        snprintf(f->id, sizeof f->id, "%s", a->fingerprint);
        f->nranks = a->nranks;
        f->nhosts = a->nhosts;
        snprintf(f->desc, sizeof f->desc, "%s", a->description);
        f->samples = 0;
    }
    l->f[l->n - 1].samples += a->samples;
    return 0;
}

static void fp_print(FILE *out, const fp_info *f)
{
    fprintf(out, "  %s  %d ranks  %d host%s  %ld samples%s%s%s\n", f->id, f->nranks, f->nhosts,
            f->nhosts == 1 ? "" : "s", f->samples, f->desc[0] ? "  \"" : "", f->desc,
            f->desc[0] ? "\"" : "");
}

/* The fingerprints the command line selects into *sel (n of them): the
 * one of --fingerprint, those of --ranks, else all. one: exactly one is
 * needed (an export to another stack): several are an error listing them.
 * 0, or 1 after a message naming sub and path. */
static int select_fingerprints(ai_kb *kb, const char *sub, const char *path, const kb_args *a,
                               int one, fp_list *sel)
{
    fp_list all = {0};
    memset(sel, 0, sizeof *sel);
    if (ai_kb_foreach(kb, NULL, fp_visit, &all) != AI_OK || all.nomem) {
        fprintf(stderr, "autoinfra kb %s: %s\n", sub, all.nomem ? "out of memory" : ai_last_error());
        free(all.f);
        return 1;
    }
    int keep = 0;
    for (int i = 0; i < all.n; i++)
        if (a->fingerprint ? !strcmp(all.f[i].id, a->fingerprint)
                           : !a->ranks || all.f[i].nranks == a->ranks)
            all.f[keep++] = all.f[i];
    int total = all.n, rc = 0;
    all.n = keep;
    if (keep == 0 && (a->fingerprint || a->ranks || one)) {
        if (a->fingerprint)
            fprintf(stderr, "autoinfra kb %s: no measurements for fingerprint %s in %s\n", sub,
                    a->fingerprint, path);
        else if (a->ranks)
            fprintf(stderr, "autoinfra kb %s: no fingerprint of %d ranks in %s\n", sub, a->ranks,
                    path);
        else
            fprintf(stderr, "autoinfra kb %s: %s holds no measurements\n", sub, path);
        if (total > 0) {
            fprintf(stderr, "it holds:\n");
            fp_list every = {0};
            if (ai_kb_foreach(kb, NULL, fp_visit, &every) == AI_OK)
                for (int i = 0; i < every.n; i++)
                    fp_print(stderr, &every.f[i]);
            free(every.f);
        }
        rc = 1;
    } else if (one && keep > 1) {
        if (a->ranks)
            fprintf(stderr, "autoinfra kb %s: %s holds %d fingerprints of %d ranks; choose one "
                            "with --fingerprint FP:\n", sub, path, keep, a->ranks);
        else
            fprintf(stderr, "autoinfra kb %s: %s holds %d fingerprints; choose one with "
                            "--fingerprint FP or --ranks N:\n", sub, path, keep);
        for (int i = 0; i < keep; i++)
            fp_print(stderr, &all.f[i]);
        rc = 1;
    }
    if (rc)
        free(all.f);
    else
        *sel = all;
    return rc;
}

static int fp_selected(const fp_list *sel, const char *fp)
{
    for (int i = 0; i < sel->n; i++)
        if (!strcmp(sel->f[i].id, fp))
            return 1;
    return 0;
}

/* ------------------------------------------------------------------ show */

typedef struct {
    int json, all;
    const fp_list *sel;
    json_t *out;    /* --json: fingerprints array */
    json_t *cur;    /* --json: current fingerprint's buckets */
    json_t *arms;   /* --json --all: the current bucket's arms */
    char fp[17];
    ai_kb_arm best; /* current bucket */
    int have_best, arms_n, buckets, fingerprints;
    int nomem;
} show_ctx;

static const char *bytes_name(size_t b, char *buf, size_t len)
{
    if (b >= ((size_t)1 << 30) && b % ((size_t)1 << 30) == 0)
        snprintf(buf, len, "%zuG", b >> 30);
    else if (b >= ((size_t)1 << 20) && b % ((size_t)1 << 20) == 0)
        snprintf(buf, len, "%zuM", b >> 20);
    else if (b >= 1024 && b % 1024 == 0)
        snprintf(buf, len, "%zuK", b >> 10);
    else
        snprintf(buf, len, "%zu", b);
    return buf;
}

static void show_bucket(show_ctx *x)
{
    if (!x->have_best)
        return;
    const ai_kb_arm *a = &x->best;
    if (x->json) {
        json_t *o = json_pack("{s:s, s:I, s:s, s:I, s:i, s:f, s:f, s:f, s:I, s:i}", "coll",
                              ai_coll_name(a->coll), "bytes", (json_int_t)a->bytes, "algo",
                              a->algo, "chunk_bytes", (json_int_t)a->chunk_bytes, "channels",
                              a->channels, "mean_us", a->mean_us, "std_us", a->std_us,
                              "confidence", a->confidence, "samples", (json_int_t)a->samples,
                              "arms", x->arms_n);
        if (o && x->arms && json_object_set(o, "all", x->arms) != 0) {
            json_decref(o);
            o = NULL;
        }
        if (!o || !x->cur || json_array_append_new(x->cur, o) != 0)
            x->nomem = 1;
    } else if (!x->all) {
        char b[32], c[32];
        printf("  %-15s %6s  %-19s %6s %3d %12.1f %7.3f %8ld %5d\n", ai_coll_name(a->coll),
               bytes_name(a->bytes, b, sizeof b), a->algo,
               a->chunk_bytes ? bytes_name(a->chunk_bytes, c, sizeof c) : "-", a->channels,
               a->mean_us, a->confidence, a->samples, x->arms_n);
    }
    json_decref(x->arms);
    x->arms = NULL;
    x->buckets++;
    x->have_best = 0;
    x->arms_n = 0;
}

static void show_fingerprint(show_ctx *x, const ai_kb_arm *a)
{
    const char *d = a->description;
    snprintf(x->fp, sizeof x->fp, "%s", a->fingerprint);
    x->fingerprints++;
    if (x->json) {
        json_t *f = json_pack("{s:s, s:i, s:i, s:s, s:[]}", "id", a->fingerprint, "nranks",
                              a->nranks, "nhosts", a->nhosts, "description", d ? d : "",
                              "buckets");
        if (!f || json_array_append_new(x->out, f) != 0) {
            x->nomem = 1;
            x->cur = NULL;
            return;
        }
        x->cur = json_object_get(f, "buckets");
        return;
    }
    printf("%sfingerprint %s  %d ranks  %d host%s%s%s%s\n", x->fingerprints > 1 ? "\n" : "",
           a->fingerprint, a->nranks, a->nhosts, a->nhosts == 1 ? "" : "s",
           d && *d ? "  \"" : "", d && *d ? d : "", d && *d ? "\"" : "");
    if (x->all)
        printf("  %-15s %6s  %-19s %6s %3s %12s %9s %8s  %s\n", "collective", "bytes", "algo",
               "chunk", "ch", "mean us", "sd us", "samples", "best (conf)");
    else
        printf("  %-15s %6s  %-19s %6s %3s %12s %7s %8s %5s\n", "collective", "bytes",
               "best algo", "chunk", "ch", "mean us", "conf", "samples", "arms");
}

/* --all: one arm, as it comes (fastest first within its bucket). */
static void show_arm(show_ctx *x, const ai_kb_arm *a)
{
    if (x->json) {
        if (!x->arms && !(x->arms = json_array()))
            x->nomem = 1;
        json_t *o = json_pack("{s:s, s:I, s:i, s:I, s:f, s:f, s:b}", "algo", a->algo,
                              "chunk_bytes", (json_int_t)a->chunk_bytes, "channels", a->channels,
                              "samples", (json_int_t)a->samples, "mean_us", a->mean_us, "std_us",
                              a->std_us, "best", a->best);
        if (!o || !x->arms || json_array_append_new(x->arms, o) != 0)
            x->nomem = 1;
        return;
    }
    char b[32], c[32], conf[32] = "";
    if (a->best)
        snprintf(conf, sizeof conf, "  * (%.3f)", a->confidence);
    printf("  %-15s %6s  %-19s %6s %3d %12.1f %9.1f %8ld%s\n", ai_coll_name(a->coll),
           bytes_name(a->bytes, b, sizeof b), a->algo,
           a->chunk_bytes ? bytes_name(a->chunk_bytes, c, sizeof c) : "-", a->channels,
           a->mean_us, a->std_us, a->samples, conf);
}

static int show_visit(const ai_kb_arm *a, void *arg)
{
    show_ctx *x = arg;
    if (!fp_selected(x->sel, a->fingerprint))
        return 0;
    if (strcmp(x->fp, a->fingerprint)) {
        show_bucket(x);
        show_fingerprint(x, a);
    } else if (x->have_best && (x->best.coll != a->coll || x->best.bytes != a->bytes)) {
        show_bucket(x);
    }
    x->arms_n++;
    if (a->best || !x->have_best) {
        /* the flagged best arm; before it is seen, the fastest so far */
        if (!x->have_best || a->best)
            x->best = *a;
        x->have_best = 1;
    }
    if (x->all)
        show_arm(x, a);
    return x->nomem;
}

static int cmd_show(ai_kb *kb, const char *path, const kb_args *a)
{
    fp_list sel;
    if (select_fingerprints(kb, "show", path, a, 0, &sel))
        return 1;
    show_ctx x = {.json = a->json, .all = a->all, .sel = &sel};
    if (a->json && !(x.out = json_array())) {
        fprintf(stderr, "autoinfra kb show: out of memory\n");
        free(sel.f);
        return 1;
    }
    ai_status_t st = ai_kb_foreach(kb, NULL, show_visit, &x);
    if (st == AI_OK)
        show_bucket(&x);
    json_decref(x.arms);
    int rc = 0;
    if (st != AI_OK || x.nomem) {
        fprintf(stderr, "autoinfra kb show: %s\n", st != AI_OK ? ai_last_error() : "out of memory");
        rc = 1;
    } else if (a->json) {
        rc = cli_print_json(json_pack("{s:s, s:O}", "kb", path, "fingerprints", x.out));
    } else if (x.fingerprints == 0) {
        printf("knowledge base %s holds no measurements yet\n", path);
    }
    json_decref(x.out);
    free(sel.f);
    return rc;
}

/* ------------------------------------------------------------------- log */

typedef struct {
    int json, n, nomem;
    const fp_list *sel;
    int ranks;
    const char *fingerprint;
    json_t *out;
} log_ctx;

/* "ring ch2", "weighted 64K ch2". */
static const char *arm_name(const char *algo, size_t chunk, int channels, char *buf, size_t len)
{
    char c[32];
    snprintf(buf, len, "%s%s%s ch%d", algo, chunk ? " " : "",
             chunk ? bytes_name(chunk, c, sizeof c) : "", channels);
    return buf;
}

static int log_visit(const ai_kb_choice *ch, void *arg)
{
    log_ctx *x = arg;
    if ((x->fingerprint && strcmp(ch->fingerprint, x->fingerprint)) ||
        (x->ranks && ch->nranks != x->ranks))
        return 0;
    char when[32];
    time_t t = (time_t)ch->at;
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    int runner = ch->runner_algo[0] != '\0';
    if (x->json) {
        json_t *r = runner ? json_pack("{s:s, s:I, s:i, s:f, s:I}", "algo", ch->runner_algo,
                                       "chunk_bytes", (json_int_t)ch->runner_chunk_bytes,
                                       "channels", ch->runner_channels, "mean_us",
                                       ch->runner_mean_us, "samples",
                                       (json_int_t)ch->runner_samples)
                           : json_null();
        json_t *o = json_pack("{s:s, s:f, s:s, s:i, s:i, s:s, s:I, s:s, s:s, s:I, s:i, s:f, s:I,"
                              " s:f, s:o}",
                              "time", when, "at", ch->at, "fingerprint", ch->fingerprint,
                              "nranks", ch->nranks, "nhosts", ch->nhosts, "coll",
                              ai_coll_name(ch->coll), "bytes", (json_int_t)ch->bytes, "reason",
                              ch->reason, "algo", ch->algo, "chunk_bytes",
                              (json_int_t)ch->chunk_bytes, "channels", ch->channels, "mean_us",
                              ch->mean_us, "samples", (json_int_t)ch->samples, "confidence",
                              ch->confidence, "runner_up", r);
        if (!o || json_array_append_new(x->out, o) != 0)
            x->nomem = 1;
        x->n++;
        return x->nomem;
    }
    char b[32], arm[64], ru[64], slower[32] = "";
    if (x->n++ == 0)
        printf("%-20s  %-16s  %5s  %-15s %6s  %-8s  %-24s %10s %6s  %s\n", "when (UTC)",
               "fingerprint", "ranks", "collective", "bytes", "reason", "chose", "mean us",
               "conf", "runner-up (mean us, slower)");
    if (runner)
        snprintf(slower, sizeof slower, " (%.1f, %+.1f%%)", ch->runner_mean_us,
                 (ch->runner_mean_us / ch->mean_us - 1) * 100);
    printf("%-20s  %-16s  %5d  %-15s %6s  %-8s  %-24s %10.1f %6.3f  %s%s\n", when,
           ch->fingerprint, ch->nranks, ai_coll_name(ch->coll), bytes_name(ch->bytes, b, sizeof b),
           ch->reason, arm_name(ch->algo, ch->chunk_bytes, ch->channels, arm, sizeof arm),
           ch->mean_us, ch->confidence,
           runner ? arm_name(ch->runner_algo, ch->runner_chunk_bytes, ch->runner_channels, ru,
                             sizeof ru)
                  : "none measured",
           slower);
    return 0;
}

static int cmd_log(ai_kb *kb, const char *path, const kb_args *a)
{
    log_ctx x = {.json = a->json, .ranks = a->ranks, .fingerprint = a->fingerprint};
    if (a->json && !(x.out = json_array())) {
        fprintf(stderr, "autoinfra kb log: out of memory\n");
        return 1;
    }
    ai_status_t st = ai_kb_log_foreach(kb, NULL, log_visit, &x);
    int rc = 0;
    if (st != AI_OK || x.nomem) {
        fprintf(stderr, "autoinfra kb log: %s\n", st != AI_OK ? ai_last_error() : "out of memory");
        rc = 1;
    } else if (a->json) {
        rc = cli_print_json(json_pack("{s:s, s:O}", "kb", path, "choices", x.out));
    } else if (x.n == 0) {
        printf("knowledge base %s holds no choices%s yet (one is logged when a bucket settles, "
               "switches arm or starts warm)\n", path,
               a->fingerprint || a->ranks ? " of that fingerprint" : "");
    }
    json_decref(x.out);
    return rc;
}

/* ---------------------------------------------------------------- others */

static int cmd_export(ai_kb *kb, const char *sub, const char *path, const kb_args *a)
{
    int one = strcmp(sub, "export") != 0;
    fp_list sel;
    if (select_fingerprints(kb, sub, path, a, one || a->fingerprint || a->ranks, &sel))
        return 1;
    ai_status_t st = AI_OK;
    const char *what;
    if (!one) {
        what = "knowledge base JSON";
        st = ai_kb_export_json(kb, sel.n == 1 ? sel.f[0].id : NULL, a->file);
    } else if (!strcmp(sub, "export-ompi")) {
        st = ai_kb_export_ompi_rules(kb, sel.f[0].id, a->file);
        what = "Open MPI 4.1 coll/tuned rules";
    } else {
        st = ai_kb_export_mpich_json(kb, sel.f[0].id, a->file);
        what = "MPICH 4.0 collective selection JSON";
    }
    if (st != AI_OK) {
        fprintf(stderr, "autoinfra kb %s: %s\n", sub, ai_last_error());
        free(sel.f);
        return 1;
    }
    if (sel.n == 1) {
        const fp_info *f = &sel.f[0];
        fprintf(stderr, "autoinfra kb %s: fingerprint %s (%d ranks, %d host%s%s%s%s)\n", sub,
                f->id, f->nranks, f->nhosts, f->nhosts == 1 ? "" : "s", f->desc[0] ? ", \"" : "",
                f->desc, f->desc[0] ? "\"" : "");
    } else {
        fprintf(stderr, "autoinfra kb %s: %d fingerprints\n", sub, sel.n);
    }
    fprintf(stderr, "autoinfra kb %s: wrote %s to %s\n", sub, what, a->file);
    free(sel.f);
    return 0;
}
static int cmd_import(const char *path, const kb_args *a)
{
    struct stat sb;
    if (stat(a->file, &sb) != 0) {
        fprintf(stderr, "autoinfra kb import: %s: %s\n", a->file, strerror(errno));
        return 1;
    }
    ai_kb *kb;
    if (open_kb(path, 0, &kb))
        return 1;
    int rc = 0;
    if (ai_kb_import_json(kb, a->file) != AI_OK) {
        fprintf(stderr, "autoinfra kb import: %s\n", ai_last_error());
        rc = 1;
    } else {
        fprintf(stderr, "autoinfra kb import: merged %s into %s\n", a->file, path);
    }
    ai_kb_close(kb);
    return rc;
}

int cli_kb_main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    int k = -1;
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        if (!strcmp(argv[1], subs[i].name))
            k = (int)i;
    if (k < 0) {
        fprintf(stderr, "autoinfra kb: unknown subcommand '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            sub_usage(stdout, k);
            return 0;
        }
    kb_args a;
    int rc = parse(k, argc - 2, argv + 2, &a);
    if (rc)
        return rc;
    char path[1024];
    if (cli_kb_path(a.kb, "kb", path, sizeof path))
        return 1;
    const char *sub = subs[k].name;
    if (!strcmp(sub, "path")) {
        printf("%s\n", path);
        return 0;
    }
    if (!strcmp(sub, "import"))
        return cmd_import(path, &a);
    ai_kb *kb;
    if (open_kb(path, 1, &kb))
        return 1;
    rc = !strcmp(sub, "show")  ? cmd_show(kb, path, &a)
         : !strcmp(sub, "log") ? cmd_log(kb, path, &a)
                               : cmd_export(kb, sub, path, &a);
    ai_kb_close(kb);
    return rc;
}
