/*
 * autoinfra plan: the job-level planner (docs/planner.md).
 *
 *   autoinfra plan --cluster C.json --model M.json --training T.json
 *                  [--fix key=value,...] [--baseline manual|homogeneous|expert|all]
 *                  [--top N] [--json]
 *   autoinfra plan --from-slurm PARTITION | --from-slurm-job [Slurm options] --model ... (cmd_slurm.c)
 *   autoinfra plan fidelity [--data DIR] [--json]   model vs published tables
 *   autoinfra plan fit [--data DIR] [--holdout SRC] [--json]  refit the parameters
 *   autoinfra plan train --kb KB --global-batch B ...  the training job from the KB
 *                                                      (cmd_plan_train.c)
 */
#include "autoinfra.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void plan_usage(FILE *out)
{
    fprintf(out,
            "usage: autoinfra plan --cluster C.json --model M.json --training T.json\n"
            "                      [--fix key=value,...] [--baseline manual|homogeneous|expert|all]\n"
            "                      [--top N] [--json]\n"
            "       autoinfra plan --from-slurm PARTITION|--from-slurm-job [--program CMD]\n"
            "                      [--cluster-out F] [Slurm options] --model M.json --training T.json ...\n"
            "       autoinfra plan fidelity [--data DIR] [--json]\n"
            "       autoinfra plan fit [--data DIR] [--holdout SOURCE|all] [--json]\n"
            "       autoinfra plan train --kb KB --global-batch B ... (plan train --help)\n"
            "\n"
            "  --fix        pin plan fields: tp pp dp cp micro_batch interleave recompute\n"
            "               (none|selective|full) sequence_parallel (true|false) zero (0..3)\n"
            "  --baseline   also evaluate baselines and the speedup over each, with where it\n"
            "               comes from (comma-separated): manual (rule of thumb), homogeneous\n"
            "               (this search, every device the slowest), expert (published\n"
            "               practice: fastest node group alone and whole cluster), all\n"
            "  --top N      also show the next N-1 best plans\n"
            "  --json       machine-readable output\n"
            "  fidelity     predicted vs published on data/calibration (default DIR)\n"
            "  fit          refit the model's free parameters to those tables and report;\n"
            "               --holdout leaves one source (korthikanti_table5 or\n"
            "               megatron_core_h100) out of the fit to test generalization\n"
            "               (any source of data/calibration/published too); --holdout all\n"
            "               runs leave-one-source-out: one fit per source on all the\n"
            "               others, a MAPE and worst row per held-out source\n"
            "  --from-slurm P  the cluster of partition P (scontrol, or --slurm-conf and\n"
            "               --topology), then the srun line of the plan; --from-slurm-job:\n"
            "               the nodes of SLURM_JOB_NODELIST; --program CMD ends the srun\n"
            "               line (PROGRAM); --cluster-out F keeps the cluster. Slurm options:\n%s",
            cli_slurm_usage());
}

static int calib_main(int argc, char **argv, int refit)
{
    const char *dir = "data/calibration", *holdout = NULL;
    int as_json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--json"))
            as_json = 1;
        else if (refit && !strcmp(argv[i], "--holdout") && i + 1 < argc)
            holdout = argv[++i];
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            plan_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "autoinfra plan %s: unknown argument '%s'\n", argv[0], argv[i]);
            plan_usage(stderr);
            return 2;
        }
    }
    char *text = NULL;
    ai_status_t st = ai_model_fidelity(dir, refit, holdout, as_json, &text);
    if (st != AI_OK) {
        fprintf(stderr, "autoinfra plan %s: %s\n", argv[0], ai_last_error());
        return 1;
    }
    fputs(text, stdout);
    if (as_json)
        fputc('\n', stdout);
    free(text);
    return 0;
}

int cli_plan_main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "fidelity"))
        return calib_main(argc - 1, argv + 1, 0);
    if (argc >= 2 && !strcmp(argv[1], "fit"))
        return calib_main(argc - 1, argv + 1, 1);
    if (argc >= 2 && !strcmp(argv[1], "train"))
        return cli_plan_train_main(argc - 1, argv + 1);

    const char *cpath = NULL, *mpath = NULL, *tpath = NULL;
    ai_plan_options opts = {NULL, 1, 0};
    int as_json = 0;
    cli_slurm_plan slurm = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        int sr = cli_slurm_plan_opt(&slurm, argc, argv, &i);
        if (sr < 0)
            return 2;
        if (sr > 0)
            continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            plan_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            as_json = 1;
        } else if (!strcmp(a, "--cluster") && has_val) {
            cpath = argv[++i];
        } else if (!strcmp(a, "--model") && has_val) {
            mpath = argv[++i];
        } else if (!strcmp(a, "--training") && has_val) {
            tpath = argv[++i];
        } else if (!strcmp(a, "--fix") && has_val) {
            opts.fix = argv[++i];
        } else if (!strcmp(a, "--baseline") && has_val) {
            /* a comma-separated list: manual, homogeneous, expert, all */
            char list[128];
            snprintf(list, sizeof list, "%s", argv[++i]);
            char *save = NULL;
            for (char *w = strtok_r(list, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
                if (!strcmp(w, "manual"))
                    opts.baseline_manual |= AI_PLAN_BASELINE_MANUAL;
                else if (!strcmp(w, "homogeneous"))
                    opts.baseline_manual |= AI_PLAN_BASELINE_HOMOGENEOUS;
                else if (!strcmp(w, "expert"))
                    opts.baseline_manual |= AI_PLAN_BASELINE_EXPERT;
                else if (!strcmp(w, "all"))
                    opts.baseline_manual |= AI_PLAN_BASELINE_ALL;
                else {
                    fprintf(stderr, "autoinfra plan: --baseline '%s': expected manual, homogeneous,"
                                    " expert or all (comma-separated)\n", w);
                    return 2;
                }
            }
        } else if (!strcmp(a, "--top") && has_val) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || n < 1 || n > 1000) {
                fprintf(stderr, "autoinfra plan: --top '%s': expected 1..1000\n", argv[i]);
                return 2;
            }
            opts.top = (int)n;
        } else {
            fprintf(stderr, "autoinfra plan: unknown or incomplete argument '%s'\n", a);
            plan_usage(stderr);
            return 2;
        }
    }
    int sr = cli_slurm_plan_cluster(&slurm, &cpath);
    if (sr)
        return sr;
    if (!cpath || !mpath || !tpath) {
        cli_slurm_plan_free(&slurm);
        fprintf(stderr, "autoinfra plan: --cluster, --model and --training are required\n");
        plan_usage(stderr);
        return 2;
    }

    int rc = 1;
    ai_cluster *cluster = NULL;
    ai_model_spec *model = NULL;
    ai_training *training = NULL;
    ai_plan_report *report = NULL;
    char *text = NULL;
    ai_status_t st;
    if ((st = ai_cluster_load(cpath, &cluster)) != AI_OK ||
        (st = ai_model_spec_load(mpath, &model)) != AI_OK ||
        (st = ai_training_load(tpath, &training)) != AI_OK) {
        fprintf(stderr, "autoinfra plan: %s\n", ai_last_error());
        goto out;
    }
    cli_slurm_plan_free(&slurm);
    if ((st = ai_plan(cluster, model, training, &opts, &report)) != AI_OK) {
        fprintf(stderr, "autoinfra plan: %s: %s\n", ai_strerror(st), ai_last_error());
        rc = st == AI_ERR_INVALID ? 2 : 1;
        goto out;
    }
    st = as_json ? ai_plan_report_json(report, &text) : ai_plan_report_text(report, &text);
    if (st != AI_OK) {
        fprintf(stderr, "autoinfra plan: %s\n", ai_last_error());
        goto out;
    }
    if (cli_slurm_plan_print(&slurm, cluster, report, as_json, &text)) {
        fprintf(stderr, "autoinfra plan: cannot make the srun line\n");
        goto out;
    }
    fputs(text, stdout);
    if (as_json)
        fputc('\n', stdout);
    rc = 0;
    ai_plan_summary sum;
    if (ai_plan_report_summary(report, 0, &sum) == AI_OK && !sum.feasible) {
        fprintf(stderr, "autoinfra plan: the pinned plan needs %.1f GB per device: it does not fit\n",
                sum.memory_GB_per_device);
        rc = 1;
    }
out:
    cli_slurm_plan_free(&slurm);
    free(text);
    ai_plan_report_destroy(report);
    ai_training_destroy(training);
    ai_model_spec_destroy(model);
    ai_cluster_destroy(cluster);
    return rc;
}
