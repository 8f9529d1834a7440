/*
 * Point-to-point calls (ai_send, ai_recv, ai_sendrecv; nonblocking
 * ai_isend, ai_irecv, ai_irecv_any, ai_p2p_progress) over shared memory and TCP, their interplay with collectives, and communicator creation
 * through a caller's key-value store (ai_comm_create_with_store): here a
 * directory of files that forked ranks share.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "autoinfra.h"
#include "support/ranks.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static unsigned char pattern(int from, int to, size_t i) { return (unsigned char)(from * 31 + to * 7 + i * 13); }

static int check_bytes(const unsigned char *b, size_t n, int from, int to, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(from, to, i)) {
            fprintf(stderr, "%s: byte %zu from rank %d to %d is %u, want %u\n", what, i, from, to,
                    b[i], pattern(from, to, i));
            return 1;
        }
    return 0;
}

static const size_t sizes[] = {0, 1, 8, 4093, 1 << 20, 5 << 20};

/* A ring of sends and receives (even ranks send first, odd receive first:
 * blocking calls in that order cannot deadlock), then every pair
 * exchanging at once with ai_sendrecv (would deadlock with blocking sends
 * larger than a ring), then a collective: the call count stays aligned. */
static int p2p_body(ai_comm *c, void *arg)
{
    int rank = ai_comm_rank(c), n = ai_comm_size(c);
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    size_t max = 5 << 20;
    unsigned char *s = malloc(max), *r = malloc(max);
    int rc = 0;
    if (!s || !r) {
        rc = 90;
        goto out;
    }
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes && !rc; k++) {
        size_t b = sizes[k];
        for (size_t i = 0; i < b; i++)
            s[i] = pattern(rank, next, i);
        ai_status_t st1, st2;
        if (rank % 2 == 0) {
            st1 = ai_send(c, next, s, b);
            st2 = ai_recv(c, prev, r, b);
        } else {
            st2 = ai_recv(c, prev, r, b);
            st1 = ai_send(c, next, s, b);
        }
        if (st1 != AI_OK || st2 != AI_OK) {
            fprintf(stderr, "rank %d: ring of %zu bytes: %s\n", rank, b, ai_last_error());
            rc = 1;
            break;
        }
        rc = check_bytes(r, b, prev, rank, "ring");
        for (int d = 1; d < n && !rc; d++) {
            int to = (rank + d) % n, from = (rank + n - d) % n;
            for (size_t i = 0; i < b; i++)
                s[i] = pattern(rank, to, i);
            if (ai_sendrecv(c, to, s, b, from, r, b) != AI_OK) {
                fprintf(stderr, "rank %d: sendrecv %zu bytes: %s\n", rank, b, ai_last_error());
                rc = 2;
                break;
            }
            rc = check_bytes(r, b, from, rank, "sendrecv");
        }
        int32_t one = 1;
        if (!rc && (ai_allreduce(c, AI_IN_PLACE, &one, 1, AI_I32, AI_SUM, NULL) != AI_OK || one != n)) {
            fprintf(stderr, "rank %d: allreduce after p2p: %d (%s)\n", rank, one, ai_last_error());
            rc = 3;
        }
    }
out:
    free(s);
    free(r);
    return rc;
}

static void test_p2p_shm(void **state)
{
    assert_int_equal(ranks_run(3, NULL, p2p_body, NULL), 0);
}

static void test_p2p_tcp(void **state)
{
    ranks_opts o = {.nhosts = 4};
    assert_int_equal(ranks_run(4, &o, p2p_body, NULL), 0);
}

/* Rank 0 sends a point-to-point message where rank 1 runs a collective
 * over messages: both fail by name, nobody takes the message for the
 * collective's data. (On one host `auto` would run `direct`, which reads
 * shared slots, not messages: no message is ever mistaken there.) */
static int mixup_body(ai_comm *c, void *arg)
{
    int rank = ai_comm_rank(c);
    uint64_t v = 7;
    ai_algo_opts rd = {.algo = "recursive_doubling"};
    ai_status_t st = rank == 0 ? ai_send(c, 1, &v, sizeof v)
                               : ai_allreduce(c, AI_IN_PLACE, &v, 1, AI_U8, AI_SUM, &rd);
    if (rank == 1 && (st != AI_ERR_PROTO || !strstr(ai_last_error(), "point-to-point"))) {
        fprintf(stderr, "rank 1: want AI_ERR_PROTO naming point-to-point, got %s: %s\n",
                ai_strerror(st), ai_last_error());
        return 1;
    }
    return 0;
}

static void test_p2p_meets_collective(void **state)
{
    ranks_opts o = {.keep_going = 1, .timeout_s = 3};
    int status[2];
    o.status = status;
    ranks_run(2, &o, mixup_body, NULL);
    assert_int_equal(status[1], 0);
}

/* Nonblocking: every rank posts its receives from both neighbours before
 * its sends to them (blocking calls in that order would deadlock on every
 * rank), above and below a shared-memory ring's size, and moves them in
 * short slices until done; then a collective. */
static int nb_body(ai_comm *c, void *arg)
{
    int rank = ai_comm_rank(c), n = ai_comm_size(c);
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    size_t max = 5 << 20;
    unsigned char *s[2] = {malloc(max), malloc(max)}, *r[2] = {malloc(max), malloc(max)};
    int rc = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes && !rc && s[0] && s[1] && r[0] && r[1]; k++) {
        size_t b = sizes[k];
        int peer[2] = {next, prev};
        ai_p2p *req[4] = {0};
        for (int j = 0; j < 2; j++)
            for (size_t i = 0; i < b; i++)
                s[j][i] = pattern(rank, peer[j], i);
        if (ai_irecv(c, prev, r[0], b, &req[0]) != AI_OK || ai_irecv(c, next, r[1], b, &req[1]) != AI_OK ||
            ai_isend(c, next, s[0], b, &req[2]) != AI_OK || ai_isend(c, prev, s[1], b, &req[3]) != AI_OK) {
            fprintf(stderr, "rank %d: posting %zu bytes: %s\n", rank, b, ai_last_error());
            rc = 1;
        }
        int done = 0, passes = 0;
        while (!rc && done < 4) {
            if (ai_p2p_progress(c, req, 4, passes++ % 2 ? 0.002 : 0, &done) != AI_OK) {
                fprintf(stderr, "rank %d: progress of %zu bytes: %s\n", rank, b, ai_last_error());
                rc = 2;
            }
        }
        for (int j = 0; j < 4; j++)
            ai_p2p_free(req[j]);
        if (!rc)
            rc = check_bytes(r[0], b, prev, rank, "irecv from prev");
        if (!rc)
            rc = check_bytes(r[1], b, next, rank, "irecv from next");
        int32_t one = 1;
        if (!rc && (ai_allreduce(c, AI_IN_PLACE, &one, 1, AI_I32, AI_SUM, NULL) != AI_OK || one != n)) {
            fprintf(stderr, "rank %d: allreduce after nonblocking p2p: %s\n", rank, ai_last_error());
            rc = 3;
        }
    }
    /* More requests than ai_p2p_progress keeps on its stack: 40 receives
     * from prev posted before 40 sends to next, messages in order. */
    enum { K = 40 };
    ai_p2p *q[2 * K] = {0};
    uint64_t in[K], out[K];
    for (int j = 0; j < K && !rc; j++) {
        out[j] = (uint64_t)rank * 1000 + (uint64_t)j;
        in[j] = 0;
        if (ai_irecv(c, prev, &in[j], sizeof in[j], &q[j]) != AI_OK)
            rc = 4;
    }
    for (int j = 0; j < K && !rc; j++)
        if (ai_isend(c, next, &out[j], sizeof out[j], &q[K + j]) != AI_OK)
            rc = 4;
    for (int done = 0; !rc && done < 2 * K;)
        if (ai_p2p_progress(c, q, 2 * K, 0.002, &done) != AI_OK) {
            fprintf(stderr, "rank %d: progress of %d requests: %s\n", rank, 2 * K, ai_last_error());
            rc = 5;
        }
    for (int j = 0; j < K && !rc; j++)
        if (in[j] != (uint64_t)prev * 1000 + (uint64_t)j) {
            fprintf(stderr, "rank %d: message %d from rank %d: %llu\n", rank, j, prev,
                    (unsigned long long)in[j]);
            rc = 6;
        }
    for (int j = 0; j < 2 * K; j++)
        ai_p2p_free(q[j]);
    for (int j = 0; j < 2; j++) {
        free(s[j]);
        free(r[j]);
    }
    return rc;
}

static void test_p2p_nonblocking_shm(void **state)
{
    assert_int_equal(ranks_run(3, NULL, nb_body, NULL), 0);
}

static void test_p2p_nonblocking_tcp(void **state)
{
    ranks_opts o = {.nhosts = 3};
    assert_int_equal(ranks_run(3, &o, nb_body, NULL), 0);
}

/* A receive nobody sends to, moved in 10 ms slices: the timeout counts
 * across the calls and fails it, naming the peer, within about the
 * communicator's timeout. */
/* Moves one request until it completes or fails; *took: the seconds it
 * took. Frees the request. */
static ai_status_t progress_until_done(ai_comm *c, ai_p2p *req, double *took)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ai_status_t st = AI_OK;
    int done = 0;
    while (st == AI_OK && !done)
        st = ai_p2p_progress(c, &req, 1, 0.01, &done);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    ai_p2p_free(req);
    return st;
}

static int nb_timeout_body(ai_comm *c, void *arg)
{
    if (ai_comm_rank(c) == 1) {
        sleep(3);
        return 0;
    }
    char b[8];
    ai_p2p *req = NULL;
    if (ai_irecv(c, 1, b, sizeof b, &req) != AI_OK)
        return 1;
    double took;
    ai_status_t st = progress_until_done(c, req, &took);
    if (st != AI_ERR_TIMEOUT || !strstr(ai_last_error(), "irecv from rank 1") || took < 0.9 ||
        took > 2.5) {
        fprintf(stderr, "rank 0: want a timeout after ~1 s naming irecv from rank 1, got %s after "
                "%.2f s: %s\n", ai_strerror(st), took, ai_last_error());
        return 2;
    }
    return 0;
}

static void test_p2p_nonblocking_timeout(void **state)
{
    ranks_opts o = {.keep_going = 1, .timeout_s = 1};
    int status[2];
    o.status = status;
    ranks_run(2, &o, nb_timeout_body, NULL);
    assert_int_equal(status[0], 0);
}

/* Receive from any rank (ai_irecv_any). Round 1: rank 0 posts two
 * any-source receives; rank 2 sends at once, rank 1 only once rank 0
 * tells it to, after the first receive completed: the first must name
 * rank 2 and the second rank 1, each holding its sender's bytes. Round 2: rank 0 posts a receive from rank 1, then
 * one from any rank; rank 1 sends two messages: the named receive takes
 * the first, the any-source one the second. A collective follows each
 * round (the call count stays aligned). */
static int any_body(ai_comm *c, void *arg)
{
    int rank = ai_comm_rank(c), n = ai_comm_size(c), rc = 0;
    size_t b = *(const size_t *)arg;
    unsigned char *s = malloc(b), *r[2] = {malloc(b), malloc(b)};
    if (!s || !r[0] || !r[1]) {
        rc = 90;
        goto out;
    }
    if (rank == 0) {
        ai_p2p *q[2] = {0};
        if (ai_irecv_any(c, r[0], b, &q[0]) != AI_OK || ai_irecv_any(c, r[1], b, &q[1]) != AI_OK ||
            ai_p2p_source(q[0]) != -1) {
            fprintf(stderr, "rank 0: posting any-source receives: %s\n", ai_last_error());
            rc = 1;
        }
        /* Rank 1 sends once told to, after the first receive completed. */
        while (!rc && !ai_p2p_done(q[0]))
            if (ai_p2p_progress(c, q, 2, 0.05, NULL) != AI_OK) {
                fprintf(stderr, "rank 0: any-source progress: %s\n", ai_last_error());
                rc = 2;
            }
        char go = 1;
        ai_p2p *all[3] = {q[0], q[1], NULL};
        if (!rc && ai_isend(c, 1, &go, 1, &all[2]) != AI_OK)
            rc = 2;
        for (int done = 0; !rc && done < 3;)
            if (ai_p2p_progress(c, all, 3, 0.05, &done) != AI_OK) {
                fprintf(stderr, "rank 0: any-source progress: %s\n", ai_last_error());
                rc = 2;
            }
        ai_p2p_free(all[2]);
        if (!rc && (ai_p2p_source(q[0]) != 2 || ai_p2p_source(q[1]) != 1)) {
            fprintf(stderr, "rank 0: sources %d and %d, want 2 (first to send) and 1\n",
                    ai_p2p_source(q[0]), ai_p2p_source(q[1]));
            rc = 3;
        }
        if (!rc)
            rc = check_bytes(r[0], b, 2, 0, "any-source from 2") || check_bytes(r[1], b, 1, 0, "any-source from 1");
        ai_p2p_free(q[0]);
        ai_p2p_free(q[1]);
    } else {
        char go = 0;
        if (rank == 1 && (ai_recv(c, 0, &go, 1) != AI_OK || go != 1))
            rc = 4;
        for (size_t i = 0; i < b; i++)
            s[i] = pattern(rank, 0, i);
        if (!rc && rank <= 2 && ai_send(c, 0, s, b) != AI_OK) {
            fprintf(stderr, "rank %d: send to 0: %s\n", rank, ai_last_error());
            rc = 4;
        }
    }
    int32_t one = 1;
    if (!rc && (ai_allreduce(c, AI_IN_PLACE, &one, 1, AI_I32, AI_SUM, NULL) != AI_OK || one != n))
        rc = 5;
    if (rc)
        goto out;
    if (rank == 0) {
        ai_p2p *q[2] = {0};
        if (ai_irecv(c, 1, r[0], b, &q[0]) != AI_OK || ai_irecv_any(c, r[1], b, &q[1]) != AI_OK)
            rc = 6;
        for (int done = 0; !rc && done < 2;)
            if (ai_p2p_progress(c, q, 2, 0.05, &done) != AI_OK) {
                fprintf(stderr, "rank 0: named + any-source progress: %s\n", ai_last_error());
                rc = 7;
            }
        if (!rc && (ai_p2p_source(q[0]) != 1 || ai_p2p_source(q[1]) != 1)) {
            fprintf(stderr, "rank 0: sources %d and %d, want 1 and 1\n", ai_p2p_source(q[0]),
                    ai_p2p_source(q[1]));
            rc = 8;
        }
        if (!rc)
            rc = check_bytes(r[0], b, 1, 0, "first from 1") || check_bytes(r[1], b, 1, 1, "second from 1");
        ai_p2p_free(q[0]);
        ai_p2p_free(q[1]);
    } else if (rank == 1) {
        for (int k = 0; k < 2 && !rc; k++) {
            for (size_t i = 0; i < b; i++)
                s[i] = pattern(1, k, i);
            if (ai_send(c, 0, s, b) != AI_OK)
                rc = 9;
        }
    }
    one = 1;
    if (!rc && (ai_allreduce(c, AI_IN_PLACE, &one, 1, AI_I32, AI_SUM, NULL) != AI_OK || one != n))
        rc = 10;
out:
    free(s);
    free(r[0]);
    free(r[1]);
    return rc;
}

static void test_p2p_any_shm(void **state)
{
    size_t sizes_any[] = {8, 3 << 20};
    for (int k = 0; k < 2; k++)
        assert_int_equal(ranks_run(3, NULL, any_body, &sizes_any[k]), 0);
}

static void test_p2p_any_tcp(void **state)
{
    ranks_opts o = {.nhosts = 3};
    size_t sizes_any[] = {8, 3 << 20};
    for (int k = 0; k < 2; k++)
        assert_int_equal(ranks_run(3, &o, any_body, &sizes_any[k]), 0);
}

/* A receive from any rank that nobody sends to fails at the timeout,
 * about 1 s, saying so; one of 0 bytes is refused. */
static int any_timeout_body(ai_comm *c, void *arg)
{
    if (ai_comm_rank(c) != 0) {
        sleep(3);
        return 0;
    }
    char b[8];
    ai_p2p *req = NULL;
    if (ai_irecv_any(c, b, 0, &req) != AI_ERR_INVALID || req || !strstr(ai_last_error(), "at least one byte"))
        return 1;
    if (ai_irecv_any(c, b, sizeof b, &req) != AI_OK)
        return 2;
    double took;
    ai_status_t st = progress_until_done(c, req, &took);
    if (st != AI_ERR_TIMEOUT || !strstr(ai_last_error(), "receive from any rank") || took < 0.9 ||
        took > 2.5) {
        fprintf(stderr, "rank 0: want a timeout after ~1 s of a receive from any rank, got %s "
                "after %.2f s: %s\n", ai_strerror(st), took, ai_last_error());
        return 3;
    }
    return 0;
}

static void test_p2p_any_timeout(void **state)
{
    ranks_opts o = {.keep_going = 1, .timeout_s = 1};
    int status[3];
    o.status = status;
    ranks_run(3, &o, any_timeout_body, NULL);
    assert_int_equal(status[0], 0);
}

static int bad_args_body(ai_comm *c, void *arg)
{
    char b[4];
    int rank = ai_comm_rank(c);
    if (ai_send(c, rank, b, 4) != AI_ERR_INVALID || !strstr(ai_last_error(), "not another rank") ||
        ai_recv(c, 9, b, 4) != AI_ERR_INVALID || ai_send(c, 1 - rank, NULL, 4) != AI_ERR_INVALID)
        return 1;
    return ai_comm_state(c) == AI_OK ? 0 : 2;
}

static void test_p2p_bad_args(void **state)
{
    assert_int_equal(ranks_run(2, NULL, bad_args_body, NULL), 0);
}

/* -------------------------------------------------- the caller's store */

/* A file per key in a directory: set writes a temporary file and renames
 * it (readers never see half a value), get polls until the file exists. */
static ai_status_t dir_set(void *ctx, const char *key, const void *value, size_t len)
{
    char path[512], tmp[600];
    snprintf(path, sizeof path, "%s/", (const char *)ctx);
    size_t n = strlen(path);
    for (const char *k = key; *k && n < sizeof path - 1; k++)
        path[n++] = *k == '/' ? '_' : *k;
    path[n] = '\0';
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return AI_ERR_IO;
    int ok = fwrite(value, 1, len, f) == len;
    ok = fclose(f) == 0 && ok;
    return ok && rename(tmp, path) == 0 ? AI_OK : AI_ERR_IO;
}

static ai_status_t dir_get(void *ctx, const char *key, void *value, size_t len, double timeout_s)
{
    char path[512];
    snprintf(path, sizeof path, "%s/", (const char *)ctx);
    size_t n = strlen(path);
    for (const char *k = key; *k && n < sizeof path - 1; k++)
        path[n++] = *k == '/' ? '_' : *k;
    path[n] = '\0';
    double end = ai_now() + timeout_s;
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t got = fread(value, 1, len, f);
            int extra = fgetc(f) != EOF;
            fclose(f);
            return got == len && !extra ? AI_OK : AI_ERR_PROTO;
        }
        if (ai_now() > end)
            return AI_ERR_TIMEOUT;
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Two communicators through two directories in each of n forked ranks,
 * alive at once: each must work, and apart from the other. */
static int store_child(int rank, int n, const char *dir_a, const char *dir_b, const char *host_id)
{
    ai_kv_store kva = {(void *)dir_a, dir_set, dir_get}, kvb = {(void *)dir_b, dir_set, dir_get};
    ai_comm_config cfg = {.rank = rank, .size = n, .timeout_s = 10, .host_id = host_id};
    ai_comm *a = NULL, *b = NULL;
    if (ai_comm_create_with_store(&cfg, &kva, &a) != AI_OK ||
        ai_comm_create_with_store(&cfg, &kvb, &b) != AI_OK) {
        fprintf(stderr, "rank %d: create through the store: %s\n", rank, ai_last_error());
        ai_comm_destroy(a);
        return 1;
    }
    int rc = 0;
    int64_t va = rank + 1, vb = 10 * (rank + 1);
    if (ai_allreduce(a, AI_IN_PLACE, &va, 1, AI_I64, AI_SUM, NULL) != AI_OK ||
        ai_allreduce(b, AI_IN_PLACE, &vb, 1, AI_I64, AI_SUM, NULL) != AI_OK ||
        va != (int64_t)n * (n + 1) / 2 || vb != 10 * va) {
        fprintf(stderr, "rank %d: allreduce through store-made comms: %lld %lld (%s)\n", rank,
                (long long)va, (long long)vb, ai_last_error());
        rc = 2;
    }
    if (ai_comm_rank(a) != rank || ai_comm_size(a) != n)
        rc = 3;
    ai_comm_destroy(b);
    ai_comm_destroy(a);
    return rc;
}

static int fork_store_ranks(int n, const char *host_mode, int only_rank, int *status)
{
    char dir_a[] = "/tmp/ai-kv-a-XXXXXX", dir_b[] = "/tmp/ai-kv-b-XXXXXX";
    if (!mkdtemp(dir_a) || !mkdtemp(dir_b))
        return -1;
    pid_t pids[8];
    fflush(NULL);
    for (int r = 0; r < n; r++) {
        pids[r] = -1;
        if (only_rank >= 0 && r != only_rank)
            continue;
        pids[r] = fork();
        if (pids[r] == 0) {
            char host[32];
            snprintf(host, sizeof host, "%s%d", host_mode, strcmp(host_mode, "tcp") ? 0 : r);
            exit(store_child(r, n, dir_a, dir_b, host));
        }
    }
    int failed = 0;
    for (int r = 0; r < n; r++) {
        int w = 0;
        if (pids[r] > 0 && waitpid(pids[r], &w, 0) == pids[r]) {
            status[r] = WIFEXITED(w) ? WEXITSTATUS(w) : 100 + WTERMSIG(w);
            failed |= status[r] != 0;
        }
    }
    for (int k = 0; k < 2; k++) {
        const char *d = k ? dir_b : dir_a;
        DIR *dd = opendir(d);
        struct dirent *e;
        char p[600];
        while (dd && (e = readdir(dd)))
            if (e->d_name[0] != '.') {
                snprintf(p, sizeof p, "%s/%s", d, e->d_name);
                unlink(p);
            }
        if (dd)
            closedir(dd);
        rmdir(d);
    }
    return failed;
}

static void test_store_create_shm(void **state)
{
    int status[3] = {0};
    assert_int_equal(fork_store_ranks(3, "shm", -1, status), 0);
}

static void test_store_create_tcp(void **state)
{
    int status[3] = {0};
    assert_int_equal(fork_store_ranks(3, "tcp", -1, status), 0);
}

/* Rank 1 of 2 alone: it waits for rank 0's key and gives up after the
 * timeout, naming rank 0. */
static int lonely_body(void)
{
    char dir[] = "/tmp/ai-kv-l-XXXXXX";
    if (!mkdtemp(dir))
        return 90;
    ai_kv_store kv = {dir, dir_set, dir_get};
    ai_comm_config cfg = {.rank = 1, .size = 2, .timeout_s = 1};
    ai_comm *c = NULL;
    double t0 = ai_now();
    ai_status_t st = ai_comm_create_with_store(&cfg, &kv, &c);
    double took = ai_now() - t0;
    int rc = 0;
    if (st != AI_ERR_TIMEOUT || !strstr(ai_last_error(), "rank 0 did not publish") || took > 5) {
        fprintf(stderr, "lonely rank: %s after %.1f s: %s\n", ai_strerror(st), took, ai_last_error());
        rc = 1;
    }
    char p[600];
    snprintf(p, sizeof p, "%s/autoinfra_rank_1", dir);
    unlink(p);
    rmdir(dir);
    return rc;
}

static void test_store_timeout(void **state)
{
    assert_int_equal(lonely_body(), 0);
}

static void test_store_bad_args(void **state)
{
    ai_kv_store half = {NULL, dir_set, NULL};
    ai_comm_config cfg = {.rank = 0, .size = 2};
    ai_comm *c = NULL;
    assert_int_equal(ai_comm_create_with_store(&cfg, &half, &c), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "without set or get"));
    assert_int_equal(ai_comm_create_with_store(&cfg, NULL, &c), AI_ERR_INVALID);
    assert_null(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_p2p_shm),
        cmocka_unit_test(test_p2p_tcp),
        cmocka_unit_test(test_p2p_meets_collective),
        cmocka_unit_test(test_p2p_bad_args),
        cmocka_unit_test(test_p2p_nonblocking_shm),
        cmocka_unit_test(test_p2p_nonblocking_tcp),
        cmocka_unit_test(test_p2p_nonblocking_timeout),
        cmocka_unit_test(test_p2p_any_shm),
        cmocka_unit_test(test_p2p_any_tcp),
        cmocka_unit_test(test_p2p_any_timeout),
        cmocka_unit_test(test_store_create_shm),
        cmocka_unit_test(test_store_create_tcp),
        cmocka_unit_test(test_store_timeout),
        cmocka_unit_test(test_store_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
