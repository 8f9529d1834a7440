/*
 * `autoinfra kb`: what the learner knows (docs/exports.md).
 *
 *   autoinfra kb show [--fingerprint FP] [--json]
 *   autoinfra kb export FILE [--fingerprint FP]
 *   autoinfra kb import FILE
 *   autoinfra kb export-ompi FILE [--fingerprint FP]
 *   autoinfra kb export-mpich FILE [--fingerprint FP]
 *   autoinfra kb path
 *
 * Every subcommand takes --kb PATH; without it AUTOINFRA_KB, else the
 * default path (ai_kb_default_path).
 */
#include "autoinfra.h"
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct {
    const char *name, *args, *help;
} subs[] = {
    {"show", "[--fingerprint FP] [--json]",
     "per fingerprint (communicator: ranks, hosts, description) the best arm of\n"
     "every collective and size bucket: algorithm, chunk, channels, mean time,\n"
     "confidence that it is the fastest, samples, and how many arms were tried.\n"
     "--json prints the same as one JSON object."},
    {"export", "FILE [--fingerprint FP]",
     "write the knowledge base (or one fingerprint) as JSON (format\n"
     "\"autoinfra-kb\", version 1) to FILE."},
    {"import", "FILE", "merge a JSON export into the knowledge base (created if missing)."},
    {"export-ompi", "FILE [--fingerprint FP]",
     "write an Open MPI 4.1 coll/tuned dynamic rules file: use it with\n"
     "  mpirun --mca coll_tuned_use_dynamic_rules 1 \\\n"
     "         --mca coll_tuned_dynamic_rules_filename FILE ...\n"
     "Without --fingerprint: the fingerprint with the most samples."},
    {"export-mpich", "FILE [--fingerprint FP]",
     "write an MPICH 4.0 collective selection file: use it with\n"
     "  MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE=FILE (and, to bypass the ch4\n"
     "  device's own selection, MPIR_CVAR_DEVICE_COLLECTIVES=none).\n"
     "Without --fingerprint: the fingerprint with the most samples."},
    {"path", "", "print the knowledge base path in use."},
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
    fprintf(out, "usage: autoinfra kb %s%s%s [--kb PATH]\n\n%s\n", subs[k].name,
            *subs[k].args ? " " : "", subs[k].args, subs[k].help);
}

/* Parsed command line of one subcommand. */
typedef struct {
    const char *file;
    const char *fingerprint;
    const char *kb;
    int json;
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
        if (!strcmp(argv[i], "--json") && !strcmp(sub, "show")) {
            a->json = 1;
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

/* ------------------------------------------------------------------ show */

typedef struct {
    int json;
    json_t *out;    /* --json: fingerprints array */
    json_t *cur;    /* --json: current fingerprint's buckets */
    char fp[17];
    ai_kb_arm best; /* current bucket */
    int have_best, arms, buckets, fingerprints;
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
                              "arms", x->arms);
        if (!o || !x->cur || json_array_append_new(x->cur, o) != 0)
            x->nomem = 1;
    } else {
        char b[32], c[32];
        printf("  %-15s %6s  %-19s %6s %3d %12.1f %7.3f %8ld %5d\n", ai_coll_name(a->coll),
               bytes_name(a->bytes, b, sizeof b), a->algo,
               a->chunk_bytes ? bytes_name(a->chunk_bytes, c, sizeof c) : "-", a->channels,
               a->mean_us, a->confidence, a->samples, x->arms);
    }
    x->buckets++;
    x->have_best = 0;
    x->arms = 0;
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
    printf("  %-15s %6s  %-19s %6s %3s %12s %7s %8s %5s\n", "collective", "bytes", "best algo",
           "chunk", "ch", "mean us", "conf", "samples", "arms");
}

static int show_visit(const ai_kb_arm *a, void *arg)
{
    show_ctx *x = arg;
    if (strcmp(x->fp, a->fingerprint)) {
        show_bucket(x);
        show_fingerprint(x, a);
    } else if (x->have_best && (x->best.coll != a->coll || x->best.bytes != a->bytes)) {
        show_bucket(x);
    }
    x->arms++;
    if (a->best || !x->have_best) {
        /* the flagged best arm; before it is seen, the fastest so far */
        if (!x->have_best || a->best)
            x->best = *a;
        x->have_best = 1;
    }
    return x->nomem;
}

static int cmd_show(ai_kb *kb, const char *path, const kb_args *a)
{
    show_ctx x = {.json = a->json};
    if (a->json && !(x.out = json_array())) {
        fprintf(stderr, "autoinfra kb show: out of memory\n");
        return 1;
    }
    ai_status_t st = ai_kb_foreach(kb, a->fingerprint, show_visit, &x);
    if (st == AI_OK)
        show_bucket(&x);
    int rc = 0;
    if (st != AI_OK || x.nomem) {
        fprintf(stderr, "autoinfra kb show: %s\n", st != AI_OK ? ai_last_error() : "out of memory");
        rc = 1;
    } else if (a->fingerprint && x.fingerprints == 0) {
        fprintf(stderr, "autoinfra kb show: no measurements for fingerprint %s in %s\n",
                a->fingerprint, path);
        rc = 1;
    } else if (a->json) {
        rc = cli_print_json(json_pack("{s:s, s:O}", "kb", path, "fingerprints", x.out));
    } else if (x.fingerprints == 0) {
        printf("knowledge base %s holds no measurements yet\n", path);
    }
    json_decref(x.out);
    return rc;
}

/* ---------------------------------------------------------------- others */

static int count_visit(const ai_kb_arm *a, void *arg)
{
    (void)a;
    ++*(long *)arg;
    return 1; /* one is enough */
}

static int need_fingerprint(ai_kb *kb, const char *sub, const char *fp, const char *path)
{
    long n = 0;
    if (!fp)
        return 0;
    if (ai_kb_foreach(kb, fp, count_visit, &n) != AI_OK) {
        fprintf(stderr, "autoinfra kb %s: %s\n", sub, ai_last_error());
        return 1;
    }
    if (n == 0) {
        fprintf(stderr, "autoinfra kb %s: no measurements for fingerprint %s in %s\n", sub, fp,
                path);
        return 1;
    }
    return 0;
}

static int cmd_export(ai_kb *kb, const char *sub, const char *path, const kb_args *a)
{
    if (need_fingerprint(kb, sub, a->fingerprint, path))
        return 1;
    ai_status_t st;
    const char *what;
    if (!strcmp(sub, "export")) {
        st = ai_kb_export_json(kb, a->fingerprint, a->file);
        what = "knowledge base JSON";
    } else if (!strcmp(sub, "export-ompi")) {
        st = ai_kb_export_ompi_rules(kb, a->fingerprint, a->file);
        what = "Open MPI 4.1 coll/tuned rules";
    } else {
        st = ai_kb_export_mpich_json(kb, a->fingerprint, a->file);
        what = "MPICH 4.0 collective selection JSON";
    }
    if (st != AI_OK) {
        fprintf(stderr, "autoinfra kb %s: %s\n", sub, ai_last_error());
        return 1;
    }
    fprintf(stderr, "autoinfra kb %s: wrote %s to %s\n", sub, what, a->file);
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
    rc = !strcmp(sub, "show") ? cmd_show(kb, path, &a) : cmd_export(kb, sub, path, &a);
    ai_kb_close(kb);
    return rc;
}
