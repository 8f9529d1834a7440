#include "support/ranks.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Exit codes carry fn's result: 0..99 as is, a negative status s as
 * 100 - s (AI_ERR_* -> 101..), anything else as 99. */
static int encode(int rc)
{
    if (rc >= 0 && rc < 100)
        return rc;
    if (rc < 0 && rc > -100)
        return 100 - rc;
    return 99;
}

static int decode(int wstatus)
{
    if (WIFSIGNALED(wstatus))
        return RANKS_SIGNAL_BASE + WTERMSIG(wstatus);
    int e = WEXITSTATUS(wstatus);
    return e >= 100 && e < 200 ? 100 - e : e;
}

/* The rendezvous port: the library's pick, below the ephemeral range, where
 * no rank's connect or bind(0) (its own listener, starting up beside rank
 * 0) can take it before rank 0 listens there. Another process may still
 * bind it explicitly first; that shows up as a failed create, not a hang. */
int ranks_free_port(void)
{
    int port = -1;
    return ai_rendezvous_port("127.0.0.1", &port) == AI_OK ? port : -1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void child_main(int rank, int n, int port, const ranks_opts *o,
                       int (*fn)(ai_comm *c, void *arg), void *arg)
{
    char host[32], token[64];
    snprintf(token, sizeof token, "ranks-test-%d", (int)getppid());
    int nh = o->nhosts > 0 ? o->nhosts : 1;
    int h = o->round_robin ? rank % nh : (int)((long)rank * nh / n);
    snprintf(host, sizeof host, "testhost%d", h);
    if (o->before_create)
        o->before_create(rank, o->hook_arg);
    ai_comm_config cfg = {
        .rank = rank,
        .size = n,
        .store_host = "127.0.0.1",
        .store_port = port,
        .token = o->token_of_rank ? o->token_of_rank(rank, o->hook_arg) : token,
        .host_id = o->host_of_rank ? o->host_of_rank(rank, o->hook_arg) : host,
        .timeout_s = o->timeout_s > 0 ? o->timeout_s : 10.0,
        .channels = o->channels,
        .no_shm = o->no_shm,
        .kb_path = o->kb_path,
    };
    ai_comm *c = NULL;
    ai_status_t st = ai_comm_create(&cfg, &c);
    if (st != AI_OK) {
        fprintf(stderr, "rank %d: ai_comm_create: %s: %s\n", rank, ai_strerror(st),
                ai_last_error());
        exit(encode(st));
    }
    int rc = fn(c, arg);
    ai_comm_destroy(c);
    /* exit(), not _exit(): LeakSanitizer runs at exit and turns a leak into
     * a failing status. */
    exit(encode(rc));
}

int ranks_run(int n, const ranks_opts *o, int (*fn)(ai_comm *c, void *arg), void *arg)
{
    static const ranks_opts defaults;
    if (!o)
        o = &defaults;
    if (n <= 0 || !fn)
        return -1;
    int port = ranks_free_port();
    if (port < 0) {
        perror("ranks_run: free port");
        return -1;
    }
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    int *st = calloc((size_t)n, sizeof *st);
    if (!pids || !st) {
        free(pids);
        free(st);
        return -1;
    }
    fflush(NULL); /* don't let children flush the parent's buffered output */
    int started = 0, failed = 0;
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("ranks_run: fork");
            failed = 1;
            break;
        }
        if (pid == 0) {
            free(pids); /* the child owns none of the parent's bookkeeping */
            free(st);
            child_main(r, n, port, o, fn, arg);
        }
        pids[r] = pid;
        started++;
    }

    double deadline = now_s() + (o->deadline_s > 0 ? o->deadline_s : 60.0);
    int running = started, killed = 0;
    for (int r = 0; r < n; r++)
        st[r] = r < started ? -1 : RANKS_KILLED;
    while (running > 0) {
        /* Reap only our own children (the caller may have others). */
        int reaped = 0;
        for (int r = 0; r < started; r++) {
            int w;
            if (pids[r] <= 0 || waitpid(pids[r], &w, WNOHANG) != pids[r])
                continue;
            pids[r] = 0;
            running--;
            reaped = 1;
            if (st[r] == RANKS_KILLED)
                continue;
            st[r] = decode(w);
            if (st[r] != 0) {
                fprintf(stderr, "ranks_run: rank %d of %d failed (status %d)\n", r, n, st[r]);
                failed = 1;
            }
        }
        if (reaped)
            continue;
        int expired = now_s() > deadline;
        if (expired && !killed)
            fprintf(stderr, "ranks_run: deadline of %.0f s exceeded\n",
                    o->deadline_s > 0 ? o->deadline_s : 60.0);
        if ((expired || (failed && !o->keep_going)) && !killed) {
            for (int r = 0; r < started; r++) {
                if (pids[r] > 0) {
                    kill(pids[r], SIGKILL);
                    st[r] = RANKS_KILLED;
                }
            }
            killed = 1;
            failed = 1;
        }
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (o->status)
        memcpy(o->status, st, (size_t)n * sizeof *st);
    free(pids);
    free(st);
    return failed ? 1 : 0;
}
