/*
 * `autoinfra profile`: the compute profiles in the knowledge base
 * (docs/formats.md, "Compute profile"; docs/learner.md).
 *
 *   autoinfra profile import FILE [--kb PATH]
 *   autoinfra profile show [--fingerprint FP] [--json] [--kb PATH]
 *
 * --kb PATH as for `autoinfra kb`: without it AUTOINFRA_KB, else the
 * default path.
 */
#include "autoinfra.h"
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: autoinfra profile import FILE [--kb PATH]\n"
            "       autoinfra profile show [--fingerprint FP] [--json] [--kb PATH]\n"
            "\n"
            "  import  store a compute profile (the training job's --profile-out FILE,\n"
            "          \"kind\": \"compute-profile\") under its fingerprint; a bad file is\n"
            "          refused whole, naming the JSON path\n"
            "  show    every stored profile: model, per rank host, GEMM and attention\n"
            "          GFLOP/s, optimizer step and the (batch, forward+backward) points\n"
            "--kb PATH selects the knowledge base (default: $AUTOINFRA_KB, else the\n"
            "user's cache, as `autoinfra kb path` prints).\n");
}

typedef struct {
    int json;
    json_t *out;
    char fp[17], preset[32];
    int n, nomem;
} show_ctx;

static int show_visit(const ai_kb_profile *p, void *arg)
{
    show_ctx *x = arg;
    x->n++;
    if (x->json) {
        json_t *steps = json_array();
        for (int i = 0; i < p->npoints; i++)
            json_array_append_new(steps, json_pack("{s:i, s:f}", "batch", p->point[i].batch,
                                                   "fwd_bwd_s", p->point[i].fwd_bwd_s));
        json_t *o = json_pack("{s:s, s:{s:s, s:i, s:i, s:i, s:i, s:I, s:I}, s:i, s:s, s:f, s:f,"
                              " s:f, s:o, s:f}",
                              "fingerprint", p->fingerprint, "model", "preset", p->preset,
                              "layers", p->layers, "dim", p->dim, "heads", p->heads, "ctx",
                              p->ctx, "params", (json_int_t)p->params, "grad_bytes",
                              (json_int_t)p->grad_bytes, "rank", p->rank, "host", p->host,
                              "gemm_gflops", p->gemm_gflops, "attention_gflops",
                              p->attention_gflops, "optimizer_s", p->optimizer_s, "step", steps,
                              "measured_at", p->measured_at);
        /* the optional terms of a job step, when measured */
        const char *tn[] = {"allreduce_beside_s", "step_overhead_s"};
        const double tv[] = {p->allreduce_beside_s, p->step_overhead_s};
        for (int i = 0; o && i < 2; i++)
            if (tv[i] > 0 && json_object_set_new(o, tn[i], json_real(tv[i])) != 0)
                x->nomem = 1;
        if (!o || json_array_append_new(x->out, o) != 0)
            x->nomem = 1;
        return x->nomem;
    }
    if (strcmp(x->fp, p->fingerprint) || strcmp(x->preset, p->preset)) {
        snprintf(x->fp, sizeof x->fp, "%s", p->fingerprint);
        snprintf(x->preset, sizeof x->preset, "%s", p->preset);
        printf("%sfingerprint %s  model %s: %d layers, dim %d, %d heads, ctx %d, %.2fM params,"
               " %.1f MiB of gradients\n", x->n > 1 ? "\n" : "", p->fingerprint, p->preset,
               p->layers, p->dim, p->heads, p->ctx, p->params / 1e6, p->grad_bytes / 1048576.0);
        printf("  %4s %-16s %9s %9s %9s  %s\n", "rank", "host", "gemm GF/s", "attn GF/s",
               "optim s", "batch: fwd+bwd s");
    }
    printf("  %4d %-16s %9.2f %9.2f %9.4f ", p->rank, p->host, p->gemm_gflops,
           p->attention_gflops, p->optimizer_s);
    for (int i = 0; i < p->npoints; i++)
        printf(" %d: %.4f", p->point[i].batch, p->point[i].fwd_bwd_s);
    if (p->allreduce_beside_s > 0 || p->step_overhead_s > 0)
        printf("  (allreduce beside %.4f s, step overhead %.4f s)", p->allreduce_beside_s,
               p->step_overhead_s);
    printf("\n");
    return 0;
}

int cli_profile_main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *sub = argv[1], *file = NULL, *kbp = NULL, *fp = NULL;
    int json = 0, is_import = !strcmp(sub, "import");
    if (!is_import && strcmp(sub, "show")) {
        fprintf(stderr, "autoinfra profile: unknown subcommand '%s'\n", sub);
        usage(stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        const char *v = NULL;
        int m;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!is_import && !strcmp(argv[i], "--json")) {
            json = 1;
        } else if ((m = cli_match_opt(argc, argv, &i, "--kb", &v)) != 0) {
            if (m < 0 || !*v) {
                fprintf(stderr, "autoinfra profile %s: --kb needs a path\n", sub);
                return 2;
            }
            kbp = v;
        } else if (!is_import && (m = cli_match_opt(argc, argv, &i, "--fingerprint", &v)) != 0) {
            if (m < 0 || strlen(v) != 16) {
                fprintf(stderr, "autoinfra profile show: --fingerprint needs 16 hex digits\n");
                return 2;
            }
            fp = v;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "autoinfra profile %s: unknown option '%s'\n", sub, argv[i]);
            usage(stderr);
            return 2;
        } else if (is_import && !file) {
            file = argv[i];
        } else {
            fprintf(stderr, "autoinfra profile %s: unexpected argument '%s'\n", sub, argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (is_import && !file) {
        fprintf(stderr, "autoinfra profile import: missing FILE\n");
        usage(stderr);
        return 2;
    }
    char path[1024];
    if (cli_kb_path(kbp, "profile", path, sizeof path))
        return 1;
    ai_kb *kb;
    if (ai_kb_open(path, !is_import, &kb) != AI_OK) {
        fprintf(stderr, "autoinfra profile %s: cannot open the knowledge base %s: %s\n", sub, path,
                ai_last_error());
        return 1;
    }
    int rc = 0, n = 0;
    if (is_import) {
        if (ai_kb_profile_import(kb, file, &n) != AI_OK) {
            fprintf(stderr, "autoinfra profile import: %s\n", ai_last_error());
            rc = 1;
        } else {
            fprintf(stderr, "autoinfra profile import: %d rank%s of %s stored in %s\n", n,
                    n == 1 ? "" : "s", file, path);
        }
        ai_kb_close(kb);
        return rc;
    }
    show_ctx x = {.json = json, .out = json ? json_array() : NULL};
    ai_status_t st = ai_kb_profile_foreach(kb, fp, show_visit, &x);
    if (st != AI_OK || x.nomem) {
        fprintf(stderr, "autoinfra profile show: %s\n", st != AI_OK ? ai_last_error() : "out of memory");
        rc = 1;
    } else if (json) {
        rc = cli_print_json(json_pack("{s:s, s:O}", "kb", path, "profiles", x.out));
    } else if (!x.n) {
        printf("knowledge base %s holds no compute profile%s%s\n", path, fp ? " of " : "",
               fp ? fp : "");
    }
    json_decref(x.out);
    ai_kb_close(kb);
    return rc;
}
