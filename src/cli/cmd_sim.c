/*
 * autoinfra sim: whole training runs under failures (docs/sim.md).
 *
 *   autoinfra sim --cluster C --model M --training T [--reliability R]
 *                 [--tokens N | --days D] [--policy none|young-daly|learned|oracle|rl]
 *                 [--checkpoint-every MINUTES] [--recovery restart|shrink]
 *                 [--step-time S] [--runs N] [--seed S] [--json]
 *   autoinfra sim predict --trace FILE [...]   (failing nodes from a fault trace)
 */
#include "autoinfra.h"
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void sim_usage(FILE *out)
{
    fprintf(out,
            "usage: autoinfra sim --cluster C.json --model M.json --training T.json\n"
            "                     [--reliability R.json] [--tokens N | --days D]\n"
            "                     [--policy none|young-daly|oracle|learned|rl] [--checkpoint-every MIN]\n"
            "                     [--recovery restart|shrink] [--step-time S]\n"
            "                     [--runs N] [--seed S] [--rl-train-runs N] [--rl-iters N] [--json]\n"
            "                     [--events]\n"
            "\n"
            "  --reliability    failure rates, recovery and checkpoint costs (docs/formats.md);\n"
            "                   default: Llama 3's interruption rate and causes\n"
            "  --tokens N       train N tokens (default: the training spec's tokens)\n"
            "  --days D         simulate D days of wall time instead\n"
            "  --policy         checkpoint policy (default young-daly); learned: a failure\n"
            "                   predictor on simulated telemetry decides; rl: a policy that\n"
            "                   drains, excludes or checkpoints on warnings, trained first by\n"
            "                   cross-entropy search on runs of other seeds (docs/sim.md)\n"
            "  --rl-train-runs N, --rl-iters N  policy rl: runs per candidate (16), generations (8)\n"
            "  --fail-at-step N [--rejoin-at-step M] [--shrunk-step-time S]  replay one measured\n"
            "                   run: one failure in step N, the node back at step M, the shrunk\n"
            "                   group's step time (with --step-time, policy none)\n"
            "  --shared-cores N the ranks share N cores (a CPU testbed): throughput follows\n"
            "                   min(ranks, N), not the ranks\n"
            "  --checkpoint-every MIN  with policy none: a checkpoint every MIN minutes of compute\n"
            "  --recovery       restart the job from the last checkpoint (default), or shrink\n"
            "                   and go on on fewer devices until a spare joins\n"
            "  --step-time S    a measured step time in seconds (the planner is not run)\n"
            "  --runs N         Monte Carlo runs (default 100)   --seed S (default 1)\n"
            "  --json           machine-readable output\n"
            "  --events         with --runs 1 --json: the run's timeline (failures, checkpoints,\n"
            "                   detection, restarts, shrinks, grows) as an events array\n"
            "\n"
            "       autoinfra sim predict --trace FILE ...   failing nodes from a fault trace\n");
}

static int parse_pos(const char *flag, const char *text, double *out)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !isfinite(v) || v <= 0) {
        fprintf(stderr, "autoinfra sim: %s '%s': expected a number > 0\n", flag, text);
        return -1;
    }
    *out = v;
    return 0;
}

/* autoinfra sim predict --trace FILE [--nodes N] [--window-days W]
 *                       [--train-share F] [--top K] [--json] */
static int sim_predict_main(int argc, char **argv)
{
    const char *trace = NULL;
    ai_sim_predict_options o = {0, 0, 0, 0};
    int as_json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int m;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: autoinfra sim predict --trace FILE [--nodes N] [--window-days W]\n"
                   "                             [--train-share F] [--top K] [--json]\n"
                   "  which nodes fail within W days (7), from their fault history: fitted on\n"
                   "  the first F of the trace (0.5), measured on the rest against the nodes\n"
                   "  that failed most so far; K nodes flagged per window (10); N: the\n"
                   "  cluster's nodes, those never failing included (default: the trace's)\n");
            return 0;
        } else if (!strcmp(a, "--json")) {
            as_json = 1;
        } else if ((m = cli_match_opt(argc, argv, &i, "--trace", &v)) != 0) {
            if (m < 0)
                goto missing;
            trace = v;
        } else if ((m = cli_match_opt(argc, argv, &i, "--nodes", &v)) != 0) {
            if (m < 0 || cli_parse_int(v, 1, 10000000, &o.nodes))
                goto bad;
        } else if ((m = cli_match_opt(argc, argv, &i, "--top", &v)) != 0) {
            if (m < 0 || cli_parse_int(v, 1, 10000000, &o.topk))
                goto bad;
        } else if ((m = cli_match_opt(argc, argv, &i, "--window-days", &v)) != 0) {
            if (m < 0 || parse_pos(a, v, &o.window_days))
                return 2;
        } else if ((m = cli_match_opt(argc, argv, &i, "--train-share", &v)) != 0) {
            if (m < 0 || parse_pos(a, v, &o.train_share))
                return 2;
            if (o.train_share >= 1) {
                fprintf(stderr, "autoinfra sim predict: --train-share %s: want 0 < F < 1\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "autoinfra sim predict: unknown argument '%s'\n", a);
            return 2;
        }
        continue;
    missing:
        fprintf(stderr, "autoinfra sim predict: %s needs a value\n", a);
        return 2;
    bad:
        fprintf(stderr, "autoinfra sim predict: %s '%s': expected a positive integer\n", a,
                v ? v : "");
        return 2;
    }
    if (!trace) {
        fprintf(stderr, "autoinfra sim predict: --trace FILE is required\n");
        return 2;
    }
    char *text = NULL;
    ai_status_t st = ai_sim_predict(trace, &o, as_json, &text);
    if (st != AI_OK) {
        fprintf(stderr, "autoinfra sim predict: %s\n", ai_last_error());
        return st == AI_ERR_NOMEM ? 1 : 2;
    }
    fputs(text, stdout);
    if (as_json)
        fputc('\n', stdout);
    free(text);
    return 0;
}

/* What the command line asks of the simulation. */
typedef struct sim_args {
    const char *cpath, *mpath, *tpath, *rpath;
    ai_sim_options o;
    int as_json, policy_given;
} sim_args;

/* How one option went: the options are read by three tables in turn (the
 * spec files, the amounts, the policy), each passing on what is not its
 * own. */
enum { OPT_OK = 0, OPT_NOT_MINE = 1, OPT_EXIT = 2, OPT_MISSING = -1 };

/* --cluster, --model, --training, --reliability: the specs' paths. */
static int sim_opt_files(int argc, char **argv, int *i, sim_args *s)
{
    const char **slot[] = {&s->cpath, &s->mpath, &s->tpath, &s->rpath};
    const char *names[] = {"--cluster", "--model", "--training", "--reliability"};
    for (size_t k = 0; k < sizeof slot / sizeof *slot; k++) {
        const char *v = NULL;
        int m = cli_match_opt(argc, argv, i, names[k], &v);
        if (m < 0)
            return OPT_MISSING;
        if (m > 0) {
            *slot[k] = v;
            return OPT_OK;
        }
    }
    return OPT_NOT_MINE;
}

/* The run's amounts and the measured figures of a replay: each a number
 * above 0 (the shared cores a count). */
static int sim_opt_amounts(int argc, char **argv, int *i, sim_args *s)
{
    const char *a = argv[*i], *v = NULL;
    ai_sim_options *o = &s->o;
    int m;
    if ((m = cli_match_opt(argc, argv, i, "--tokens", &v)) != 0) {
        if (m < 0)
            return OPT_MISSING;
        return parse_pos("--tokens", v, &o->tokens) ? OPT_EXIT : OPT_OK;
    } else if ((m = cli_match_opt(argc, argv, i, "--days", &v)) != 0) {
        if (m < 0)
            return OPT_MISSING;
        return parse_pos("--days", v, &o->days) ? OPT_EXIT : OPT_OK;
    } else if ((m = cli_match_opt(argc, argv, i, "--checkpoint-every", &v)) != 0) {
        if (m < 0)
            return OPT_MISSING;
        return parse_pos("--checkpoint-every", v, &o->checkpoint_every_min) ? OPT_EXIT : OPT_OK;
    } else if ((m = cli_match_opt(argc, argv, i, "--step-time", &v)) != 0) {
        if (m < 0)
            return OPT_MISSING;
        return parse_pos("--step-time", v, &o->step_time_s) ? OPT_EXIT : OPT_OK;
    } else if ((m = cli_match_opt(argc, argv, i, "--fail-at-step", &v)) != 0) {
        return m < 0 || parse_pos(a, v, &o->fail_at_step) ? OPT_EXIT : OPT_OK;
    } else if ((m = cli_match_opt(argc, argv, i, "--rejoin-at-step", &v)) != 0) {
        return m < 0 || parse_pos(a, v, &o->rejoin_at_step) ? OPT_EXIT : OPT_OK;
    } else if ((m = cli_match_opt(argc, argv, i, "--shrunk-step-time", &v)) != 0) {
        return m < 0 || parse_pos(a, v, &o->shrunk_step_time_s) ? OPT_EXIT : OPT_OK;
    } else if ((m = cli_match_opt(argc, argv, i, "--shared-cores", &v)) != 0) {
        if (m < 0 || cli_parse_int(v, 1, 10000000, &o->shared_cores)) {
            fprintf(stderr, "autoinfra sim: --shared-cores '%s': expected 1..10000000\n", v ? v : "");
            return OPT_EXIT;
        }
        return OPT_OK;
    }
    return OPT_NOT_MINE;
}

/* The checkpoint policy, the recovery, and the Monte Carlo's runs, seed
 * and (policy rl) training budget. */
static int sim_opt_policy(int argc, char **argv, int *i, sim_args *s)
{
    const char *v = NULL;
    ai_sim_options *o = &s->o;
    int m;
    if ((m = cli_match_opt(argc, argv, i, "--policy", &v)) != 0) {
        if (m < 0)
            return OPT_MISSING;
        if (ai_sim_policy_parse(v, &o->policy) != AI_OK) {
            fprintf(stderr, "autoinfra sim: --policy: %s\n", ai_last_error());
            return OPT_EXIT;
        }
        s->policy_given = 1;
    } else if ((m = cli_match_opt(argc, argv, i, "--recovery", &v)) != 0) {
        if (m < 0)
            return OPT_MISSING;
        if (!strcmp(v, "restart"))
            o->recovery = AI_SIM_RESTART;
        else if (!strcmp(v, "shrink"))
            o->recovery = AI_SIM_SHRINK;
        else {
            fprintf(stderr, "autoinfra sim: --recovery '%s': want restart or shrink\n", v);
            return OPT_EXIT;
        }
    } else if ((m = cli_match_opt(argc, argv, i, "--runs", &v)) != 0) {
        if (m < 0 || cli_parse_int(v, 1, 10000000, &o->runs)) {
            fprintf(stderr, "autoinfra sim: --runs '%s': expected 1..10000000\n", v ? v : "");
            return OPT_EXIT;
        }
    } else if ((m = cli_match_opt(argc, argv, i, "--rl-train-runs", &v)) != 0) {
        if (m < 0 || cli_parse_int(v, 1, 100000, &o->rl_train_runs)) {
            fprintf(stderr, "autoinfra sim: --rl-train-runs '%s': expected 1..100000\n", v ? v : "");
            return OPT_EXIT;
        }
    } else if ((m = cli_match_opt(argc, argv, i, "--rl-iters", &v)) != 0) {
        if (m < 0 || cli_parse_int(v, 1, 1000, &o->rl_iters)) {
            fprintf(stderr, "autoinfra sim: --rl-iters '%s': expected 1..1000\n", v ? v : "");
            return OPT_EXIT;
        }
    } else if ((m = cli_match_opt(argc, argv, i, "--seed", &v)) != 0) {
        long seed;
        if (m < 0 || cli_parse_long(v, 0, 0x7fffffffffffffffL, &seed)) {
            fprintf(stderr, "autoinfra sim: --seed '%s': expected an integer >= 0\n", v ? v : "");
            return OPT_EXIT;
        }
        o->seed = (uint64_t)seed;
    } else {
        return OPT_NOT_MINE;
    }
    return OPT_OK;
}

/* The command line into s, defaults first, then the checks across
 * options. Returns -1 to go on, else the exit code (0 after --help). */
static int sim_parse(int argc, char **argv, sim_args *s)
{
    memset(s, 0, sizeof *s);
    s->o.policy = AI_SIM_POLICY_YOUNG_DALY;
    s->o.recovery = AI_SIM_RESTART;
    s->o.runs = 100;
    s->o.seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            sim_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            s->as_json = 1;
            continue;
        } else if (!strcmp(a, "--events")) {
            s->o.events = 1;
            continue;
        }
        if ((r = sim_opt_files(argc, argv, &i, s)) == OPT_NOT_MINE &&
            (r = sim_opt_amounts(argc, argv, &i, s)) == OPT_NOT_MINE &&
            (r = sim_opt_policy(argc, argv, &i, s)) == OPT_NOT_MINE) {
            fprintf(stderr, "autoinfra sim: unknown argument '%s'\n", a);
            sim_usage(stderr);
            return 2;
        }
        if (r == OPT_MISSING) {
            fprintf(stderr, "autoinfra sim: %s needs a value\n", a);
            return 2;
        }
        if (r == OPT_EXIT)
            return 2;
    }
    if (!s->cpath || !s->mpath || !s->tpath) {
        fprintf(stderr, "autoinfra sim: --cluster, --model and --training are required\n");
        sim_usage(stderr);
        return 2;
    }
    if (s->o.tokens > 0 && s->o.days > 0) {
        fprintf(stderr, "autoinfra sim: give --tokens or --days, not both\n");
        return 2;
    }
    if (s->o.events && (!s->as_json || s->o.runs != 1)) {
        fprintf(stderr, "autoinfra sim: --events needs --json and --runs 1\n");
        return 2;
    }
    if (s->o.checkpoint_every_min > 0 && !s->policy_given)
        s->o.policy = AI_SIM_POLICY_NONE;
    return -1;
}

int cli_sim_main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "predict"))
        return sim_predict_main(argc - 1, argv + 1);
    sim_args s;
    int rc = sim_parse(argc, argv, &s);
    if (rc >= 0)
        return rc;

    rc = 1;
    ai_cluster *cluster = NULL;
    ai_model_spec *model = NULL;
    ai_training *training = NULL;
    ai_reliability *rel = NULL;
    ai_sim_report *report = NULL;
    char *text = NULL;
    ai_status_t st;
    if ((st = ai_cluster_load(s.cpath, &cluster)) != AI_OK ||
        (st = ai_model_spec_load(s.mpath, &model)) != AI_OK ||
        (st = ai_training_load(s.tpath, &training)) != AI_OK ||
        (st = ai_reliability_load(s.rpath, &rel)) != AI_OK) {
        fprintf(stderr, "autoinfra sim: %s\n", ai_last_error());
        rc = 2;
        goto out;
    }
    if ((st = ai_sim(cluster, model, training, rel, &s.o, &report)) != AI_OK) {
        fprintf(stderr, "autoinfra sim: %s: %s\n", ai_strerror(st), ai_last_error());
        rc = st == AI_ERR_INVALID || st == AI_ERR_UNSUPPORTED ? 2 : 1;
        goto out;
    }
    st = s.as_json ? ai_sim_report_json(report, &text) : ai_sim_report_text(report, &text);
    if (st != AI_OK) {
        fprintf(stderr, "autoinfra sim: %s\n", ai_last_error());
        goto out;
    }
    fputs(text, stdout);
    if (s.as_json)
        fputc('\n', stdout);
    rc = 0;
out:
    free(text);
    ai_sim_report_destroy(report);
    ai_reliability_destroy(rel);
    ai_training_destroy(training);
    ai_model_spec_destroy(model);
    ai_cluster_destroy(cluster);
    return rc;
}
