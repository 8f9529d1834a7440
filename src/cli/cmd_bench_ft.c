/*
 * autoinfra bench ft: what failures cost on local ranks (docs/faults.md,
 * "Measured"). Forks its own ranks (no launcher), one job per repeat:
 *
 *   1. rank (repeat % n) revokes while the others wait in an allreduce:
 *      revoke_s = last survivor's error - the revoke;
 *   2. agree and shrink on the revoked communicator (nobody dead):
 *      agree_s, shrink_s = last rank's return - last rank's entry;
 *   3. on the shrunk communicator the last rank SIGKILLs itself inside a
 *      run of allreduces: kill_s = last survivor's error - the kill;
 *   4. revoke, agree and shrink with the dead rank: agree_dead_s,
 *      shrink_dead_s as in 2, then an allreduce checked on the result.
 *
 * Times are CLOCK_MONOTONIC (one clock for every process of a machine).
 * Reported: medians (and maxima) over the repeats.
 */
#include "autoinfra.h"
#include "cli.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define FT_MAX_RANKS 64
#define FT_MAX_SIZES 8

enum { M_REVOKE, M_AGREE, M_SHRINK, M_KILL, M_AGREE_DEAD, M_SHRINK_DEAD, M_COUNT };
static const char *const metric_name[M_COUNT] = {
    "revoke_s", "agree_s", "shrink_s", "kill_s", "agree_dead_s", "shrink_dead_s",
};

typedef struct ft_shared {
    double t0[2];                  /* the revoke, the kill */
    double err[2][FT_MAX_RANKS];   /* each rank's error after them */
    double in[4][FT_MAX_RANKS];    /* entry / return of agree, shrink, agree, shrink */
    double out[4][FT_MAX_RANKS];
    int ok[FT_MAX_RANKS];
} ft_shared;

typedef struct ft_opts {
    int sizes[FT_MAX_SIZES], nsizes;
    int repeats, hosts;
    double timeout_s;
    const char *json;
} ft_opts;

static int usage(FILE *f)
{
    fprintf(f,
            "usage: autoinfra bench ft [--ranks N[,N...]] [--repeats R] [--hosts H]\n"
            "                          [--timeout S] [--json FILE]\n"
            "Forks N local ranks per repeat and measures: revoke propagation, agree and\n"
            "shrink on a revoked communicator, a SIGKILL to every survivor's error, agree\n"
            "and shrink with the dead rank (docs/faults.md). Defaults: --ranks 4,8\n"
            "--repeats 20 --hosts 1 (shared memory; H > 1 spreads ranks over H host ids,\n"
            "TCP between them) --timeout 10.\n");
    return f == stdout ? 0 : 2;
}

static void span(double *in, double *out, int r, int phase, double a, double b)
{
    in[phase * FT_MAX_RANKS + r] = a;
    out[phase * FT_MAX_RANKS + r] = b;
}

static int rank_main(const ft_opts *o, ft_shared *sh, int n, int r, int port, int rep)
{
    char token[64], host[32];
    snprintf(token, sizeof token, "bench-ft-%d-%d", (int)getppid(), rep);
    snprintf(host, sizeof host, "ftbench%d", r * o->hosts / n);
    ai_comm_config cfg = {.rank = r, .size = n, .store_host = "127.0.0.1", .store_port = port,
                          .token = token, .host_id = host, .timeout_s = o->timeout_s};
    ai_comm *c = NULL, *s = NULL, *t = NULL;
    if (ai_comm_create(&cfg, &c) != AI_OK) {
        fprintf(stderr, "rank %d: %s\n", r, ai_last_error());
        return 1;
    }
    float x = 1;
    int bad = ai_allreduce(c, AI_IN_PLACE, &x, 1, AI_F32, AI_SUM, NULL) != AI_OK;
    /* 1. revoke */
    int revoker = rep % n;
    if (r == revoker) {
        usleep(20 * 1000);
        sh->t0[0] = ai_now();
        ai_comm_revoke(c);
    } else {
        ai_status_t st = ai_allreduce(c, AI_IN_PLACE, &x, 1, AI_F32, AI_SUM, NULL);
        sh->err[0][r] = ai_now();
        bad |= st != AI_ERR_REVOKED;
    }
    /* 2. agree, shrink */
    uint64_t flags = 1;
    double a = ai_now();
    bad |= ai_comm_agree(c, &flags) != AI_OK;
    double b = ai_now();
    bad |= ai_comm_shrink(c, &s) != AI_OK;
    double d = ai_now();
    span(&sh->in[0][0], &sh->out[0][0], r, 0, a, b);
    span(&sh->in[0][0], &sh->out[0][0], r, 1, b, d);
    ai_comm_destroy(c);
    if (bad || !s) {
        fprintf(stderr, "rank %d: revoke, agree or shrink failed: %s\n", r, ai_last_error());
        ai_comm_destroy(s);
        return 1;
    }
    /* 3. a kill inside a run of allreduces */
    int victim = ai_comm_size(s) - 1;
    ai_status_t st = AI_OK;
    for (int i = 0; st == AI_OK && i < 100000; i++) {
        if (r == victim && i == 50) {
            sh->t0[1] = ai_now();
            kill(getpid(), SIGKILL);
        }
        st = ai_allreduce(s, AI_IN_PLACE, &x, 1, AI_F32, AI_SUM, NULL);
    }
    sh->err[1][r] = ai_now();
    /* 4. recover */
    ai_comm_revoke(s);
    a = ai_now();
    flags = 1;
    bad |= ai_comm_agree(s, &flags) != AI_OK;
    b = ai_now();
    bad |= ai_comm_shrink(s, &t) != AI_OK;
    d = ai_now();
    span(&sh->in[0][0], &sh->out[0][0], r, 2, a, b);
    span(&sh->in[0][0], &sh->out[0][0], r, 3, b, d);
    ai_comm_destroy(s);
    if (!bad && t) {
        double v = 1;
        bad |= ai_allreduce(t, AI_IN_PLACE, &v, 1, AI_F64, AI_SUM, NULL) != AI_OK ||
               v != ai_comm_size(t) || ai_comm_size(t) != n - 1;
    }
    if (bad)
        fprintf(stderr, "rank %d: recovery from the kill failed: %s\n", r, ai_last_error());
    ai_comm_destroy(t);
    sh->ok[r] = !bad;
    return bad;
}

/* One repeat: n ranks forked; the metrics into m[M_COUNT]. 0 ok. */
static int one_job(const ft_opts *o, int n, int rep, ft_shared *sh, double *m)
{
    memset(sh, 0, sizeof *sh);
    int port;
    if (ai_rendezvous_port(NULL, &port) != AI_OK)
        return fprintf(stderr, "bench ft: %s\n", ai_last_error()), 1;
    pid_t pid[FT_MAX_RANKS];
    fflush(NULL);
    for (int r = 0; r < n; r++) {
        pid[r] = fork();
        if (pid[r] == 0)
            _exit(rank_main(o, sh, n, r, port, rep));
    }
    int bad = 0;
    double deadline = ai_now() + 6 * o->timeout_s + 30;
    for (int left = n; left > 0;) {
        for (int r = 0; r < n; r++) {
            int w;
            if (pid[r] > 0 && waitpid(pid[r], &w, WNOHANG) == pid[r]) {
                pid[r] = 0;
                left--;
                int victim = r == n - 1; /* the kill's: the last rank of the shrunk one */
                if (!(victim ? WIFSIGNALED(w) : WIFEXITED(w) && WEXITSTATUS(w) == 0))
                    bad = 1;
            }
        }
        if (ai_now() > deadline) {
            fprintf(stderr, "bench ft: a job of %d ranks passed its deadline; killing it\n", n);
            for (int r = 0; r < n; r++)
                if (pid[r] > 0)
                    kill(pid[r], SIGKILL);
            bad = 1;
            deadline = 1e300;
        }
        usleep(2 * 1000);
    }
    if (bad)
        return 1;
    double last_err[2] = {0, 0}, last_in[4] = {0}, last_out[4] = {0};
    for (int r = 0; r < n; r++) {
        if (r != rep % n && sh->err[0][r] > last_err[0])
            last_err[0] = sh->err[0][r];
        if (r != n - 1 && sh->err[1][r] > last_err[1])
            last_err[1] = sh->err[1][r];
        for (int p = 0; p < 4; p++) {
            int alive = p < 2 || r != n - 1;
            if (alive && sh->in[p][r] > last_in[p])
                last_in[p] = sh->in[p][r];
            if (alive && sh->out[p][r] > last_out[p])
                last_out[p] = sh->out[p][r];
        }
    }
    m[M_REVOKE] = last_err[0] - sh->t0[0];
    m[M_AGREE] = last_out[0] - last_in[0];
    m[M_SHRINK] = last_out[1] - last_in[1];
    m[M_KILL] = last_err[1] - sh->t0[1];
    m[M_AGREE_DEAD] = last_out[2] - last_in[2];
    m[M_SHRINK_DEAD] = last_out[3] - last_in[3];
    return 0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int parse(int argc, char **argv, ft_opts *o)
{
    *o = (ft_opts){.sizes = {4, 8}, .nsizes = 2, .repeats = 20, .hosts = 1, .timeout_s = 10};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long l;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return usage(stdout) - 1;
        if (!v)
            return fprintf(stderr, "bench ft: %s needs a value\n", a), usage(stderr);
        i++;
        if (!strcmp(a, "--ranks")) {
            o->nsizes = 0;
            for (char *save = NULL, *buf = strdup(v), *tok = strtok_r(buf, ",", &save); ;
                 tok = strtok_r(NULL, ",", &save)) {
                if (!tok) {
                    free(buf);
                    break;
                }
                if (o->nsizes == FT_MAX_SIZES || cli_parse_long(tok, 3, FT_MAX_RANKS, &l) != 0) {
                    fprintf(stderr, "bench ft: --ranks '%s': want up to %d sizes of 3..%d\n", v,
                            FT_MAX_SIZES, FT_MAX_RANKS);
                    free(buf);
                    return 2;
                }
                o->sizes[o->nsizes++] = (int)l;
            }
        } else if (!strcmp(a, "--repeats") || !strcmp(a, "--hosts")) {
            if (cli_parse_long(v, 1, 10000, &l) != 0)
                return fprintf(stderr, "bench ft: %s '%s': want 1..10000\n", a, v), 2;
            *(!strcmp(a, "--repeats") ? &o->repeats : &o->hosts) = (int)l;
        } else if (!strcmp(a, "--timeout")) {
            char *end;
            o->timeout_s = strtod(v, &end);
            if (*end || !(o->timeout_s > 0 && o->timeout_s <= 3600))
                return fprintf(stderr, "bench ft: --timeout '%s': want seconds in (0, 3600]\n", v), 2;
        } else if (!strcmp(a, "--json")) {
            o->json = v;
        } else {
            fprintf(stderr, "bench ft: unknown option '%s'\n", a);
            return usage(stderr);
        }
    }
    return 0;
}

int cli_bench_ft_main(int argc, char **argv)
{
    ft_opts o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    ft_shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    double *all = calloc((size_t)o.repeats * M_COUNT, sizeof *all), *col = calloc((size_t)o.repeats, sizeof *col);
    FILE *js = o.json ? fopen(o.json, "w") : NULL;
    if (sh == MAP_FAILED || !all || !col || (o.json && !js)) {
        fprintf(stderr, "bench ft: %s\n", o.json && !js ? "cannot write the JSON file" : "out of memory");
        free(all);
        free(col);
        return 1;
    }
    if (js) {
        /* The command that wrote it; the arguments are options and numbers
         * (a file name with a quote or backslash is written without it). */
        fprintf(js, "{\"kind\":\"bench-ft\",\"command\":\"autoinfra bench ft");
        for (int i = 1; i < argc; i++) {
            fputc(' ', js);
            for (const char *q = argv[i]; *q; q++)
                if (*q != '"' && *q != '\\' && (unsigned char)*q >= 0x20)
                    fputc(*q, js);
        }
        fprintf(js, "\",\"hosts\":%d,\"timeout_s\":%g,\"repeats\":%d,\"runs\":[", o.hosts,
                o.timeout_s, o.repeats);
    }
    printf("# autoinfra bench ft: %d repeats, %d host id(s), timeout %g s; medians (max) in ms\n",
           o.repeats, o.hosts, o.timeout_s);
    printf("# %5s %6s", "ranks", "failed");
    for (int k = 0; k < M_COUNT; k++)
        printf(" %18s", metric_name[k]);
    printf("\n");
    for (int si = 0; si < o.nsizes; si++) {
        int n = o.sizes[si], good = 0, failed = 0;
        for (int rep = 0; rep < o.repeats; rep++) {
            if (one_job(&o, n, rep, sh, all + (size_t)good * M_COUNT) == 0)
                good++;
            else
                failed++;
        }
        printf("  %5d %6d", n, failed);
        if (js)
            fprintf(js, "%s{\"ranks\":%d,\"good\":%d,\"failed\":%d", si ? "," : "", n, good, failed);
        for (int k = 0; k < M_COUNT; k++) {
            for (int i = 0; i < good; i++)
                col[i] = all[(size_t)i * M_COUNT + k];
            qsort(col, (size_t)good, sizeof *col, cmp_d);
            double med = good ? (good % 2 ? col[good / 2] : 0.5 * (col[good / 2 - 1] + col[good / 2])) : 0;
            double mx = good ? col[good - 1] : 0;
            printf(" %9.2f (%6.1f)", med * 1e3, mx * 1e3);
            if (js)
                fprintf(js, ",\"%s\":{\"p50\":%.6f,\"max\":%.6f}", metric_name[k], med, mx);
        }
        printf("\n");
        fflush(stdout);
        if (js)
            fprintf(js, "}");
        rc |= failed > 0;
    }
    if (js) {
        fprintf(js, "]}\n");
        fclose(js);
    }
    munmap(sh, sizeof *sh);
    free(all);
    free(col);
    return rc;
}
