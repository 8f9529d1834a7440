/*
 * `autoinfra plan train`: the training job planned from the knowledge base
 * (docs/planner.md, "Planning the training job from the knowledge base").
 *
 *   autoinfra plan train --kb KB --global-batch B [--fingerprint FP] [--model PRESET]
 *                        [--profile FILE] [--cluster C.json] [--ranks N] [--fix shares=..,micro_batch=..,bucket_cap_mb=..,pipeline=..]
 *                        [--explain] [--json] [--out plan.json]
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
            "usage: autoinfra plan train --global-batch B [--kb KB] [--fingerprint FP]\n"
            "                            [--model PRESET] [--ranks N] [--fix key=value,...]\n"
            "                            [--explain] [--json] [--out FILE]\n"
            "\n"
            "Plans the data-parallel training job (autoinfra.train) from the knowledge\n"
            "base: each rank's compute profile (`autoinfra profile import`) and the\n"
            "learner's allreduce timings of the same fingerprint.\n"
            "  --global-batch B  samples per step over all ranks\n"
            "  --fingerprint FP  the profiled fingerprint (default: the only one)\n"
            "  --model PRESET    the profiled model (default: the only one)\n"
            "  --ranks N         plan ranks 0..N-1 (default: every profiled rank)\n"
            "  --profile FILE    the fingerprint and model of this profile JSON (as\n"
            "                    imported; --fingerprint and --model override)\n"
            "  --cluster C.json  its slowest NIC is the catalogue link for allreduce sizes\n"
            "                    the KB cannot say (default 10 Gbit/s, 50 us)\n"
            "  --fix             pin shares=b0/b1/..., micro_batch=M, bucket_cap_mb=X,\n"
            "                    pipeline=P (stages; 1: none)\n"
            "  --explain         every term of the predicted step with its source, and\n"
            "                    what else was considered\n"
            "  --json            print the plan JSON (docs/formats.md, training plan)\n"
            "  --out FILE        write the plan JSON to FILE (autoinfra.train --plan FILE)\n"
            "--kb KB as for `autoinfra kb` (default: $AUTOINFRA_KB, else the user's cache).\n");
}

/* The fingerprint and model preset a profile JSON names (1), or a message
 * and 0. */
static int profile_names(const char *path, char fp[17], char preset[32])
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    const char *f = NULL, *p = NULL;
    if (!j) {
        fprintf(stderr, "autoinfra plan train: --profile %s:%d:%d: %s\n", path, e.line, e.column,
                e.text);
        return 0;
    }
    int ok = json_unpack(j, "{s:s, s:{s:s}}", "fingerprint", &f, "model", "preset", &p) == 0 &&
             strlen(f) == 16 && strlen(p) < 32;
    if (ok) {
        snprintf(fp, 17, "%s", f);
        snprintf(preset, 32, "%s", p);
    } else {
        fprintf(stderr, "autoinfra plan train: --profile %s: no fingerprint (16 hex digits) and"
                        " model.preset\n", path);
    }
    json_decref(j);
    return ok;
}

/* The option of argv[*i] that takes a value, or NULL; *m as cli_match_opt. */
static const char *match_any(int argc, char **argv, int *i, const char **v, int *m)
{
    static const char *const opts[] = {"--kb", "--fingerprint", "--model", "--fix", "--out",
                                       "--global-batch", "--ranks", "--profile", "--cluster"};
    for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++)
        if ((*m = cli_match_opt(argc, argv, i, opts[k], v)) != 0)
            return opts[k];
    return NULL;
}

int cli_plan_train_main(int argc, char **argv)
{
    ai_train_plan_options o = {0};
    const char *kbp = NULL, *outp = NULL, *profp = NULL, *clusterp = NULL;
    int json = 0, explain = 0, m;
    const char *opt;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--explain")) {
            explain = 1;
        } else if ((opt = match_any(argc, argv, &i, &v, &m)) != NULL) {
            if (m < 0 || !*v) {
                fprintf(stderr, "autoinfra plan train: %s needs a value\n", opt);
                return 2;
            }
            if (!strcmp(opt, "--kb"))
                kbp = v;
            else if (!strcmp(opt, "--fingerprint")) {
                if (strlen(v) != 16) {
                    fprintf(stderr, "autoinfra plan train: --fingerprint '%s' is not 16 hex"
                                    " digits\n", v);
                    return 2;
                }
                o.fingerprint = v;
            } else if (!strcmp(opt, "--model"))
                o.model = v;
            else if (!strcmp(opt, "--fix"))
                o.fix = v;
            else if (!strcmp(opt, "--out"))
                outp = v;
            else if (!strcmp(opt, "--profile"))
                profp = v;
            else if (!strcmp(opt, "--cluster"))
                clusterp = v;
            else if (!strcmp(opt, "--global-batch")) {
                if (cli_parse_int(v, 1, 1000000, &o.global_batch)) {
                    fprintf(stderr, "autoinfra plan train: --global-batch '%s': want 1..1000000\n",
                            v);
                    return 2;
                }
            } else if (cli_parse_int(v, 1, 1024, &o.ranks)) {
                fprintf(stderr, "autoinfra plan train: --ranks '%s': want 1..1024\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "autoinfra plan train: unknown or incomplete argument '%s'\n",
                    argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!o.global_batch) {
        fprintf(stderr, "autoinfra plan train: --global-batch is required\n");
        usage(stderr);
        return 2;
    }
    char path[1024];
    if (cli_kb_path(kbp, "plan train", path, sizeof path))
        return 1;
    ai_kb *kb = NULL;
    ai_train_plan *plan = NULL;
    ai_cluster *cluster = NULL;
    char *text = NULL, *js = NULL;
    char fp[17], preset[32];
    int rc = 1;
    ai_status_t st;
    if (profp && profile_names(profp, fp, preset)) {
        if (!o.fingerprint)
            o.fingerprint = fp;
        if (!o.model)
            o.model = preset;
    } else if (profp) {
        goto out;
    }
    if (clusterp && ai_cluster_load(clusterp, &cluster) != AI_OK) {
        fprintf(stderr, "autoinfra plan train: %s\n", ai_last_error());
        goto out;
    }
    o.cluster = cluster;
    if ((st = ai_kb_open(path, 1, &kb)) != AI_OK) {
        fprintf(stderr, "autoinfra plan train: cannot open the knowledge base %s: %s\n", path,
                ai_last_error());
        goto out;
    }
    if ((st = ai_plan_train(kb, &o, &plan)) != AI_OK) {
        fprintf(stderr, "autoinfra plan train: %s\n", ai_last_error());
        rc = st == AI_ERR_INVALID ? 2 : 1;
        goto out;
    }
    if ((st = ai_train_plan_json(plan, &js)) != AI_OK ||
        (!json && (st = ai_train_plan_text(plan, explain, &text)) != AI_OK)) {
        fprintf(stderr, "autoinfra plan train: %s\n", ai_last_error());
        goto out;
    }
    if (outp) {
        FILE *f = fopen(outp, "w");
        if (!f || fputs(js, f) < 0 || fputc('\n', f) < 0 || fclose(f) != 0) {
            fprintf(stderr, "autoinfra plan train: cannot write %s\n", outp);
            if (f)
                fclose(f);
            goto out;
        }
    }
    if (json)
        printf("%s\n", js);
    else
        fputs(text, stdout);
    if (json && explain) {
        if ((st = ai_train_plan_text(plan, 1, &text)) != AI_OK)
            goto out;
        fputs(text, stderr);
    }
    rc = 0;
out:
    free(text);
    free(js);
    ai_train_plan_destroy(plan);
    ai_cluster_destroy(cluster);
    ai_kb_close(kb);
    return rc;
}
