/*
 * mpi_shim_trust: correct MPI programs that must run unchanged under the
 * shim, one per mode. Each is right under MPI alone; tests/test_mpi_shim.c
 * runs them under the shim of both MPI flavours.
 *
 *   mpi_shim_trust --pending-send allreduce|allgather BYTES...
 *       Per size: rank 0 posts MPI_Irecv of BYTES from rank 1; rank 1 sits
 *       in a blocking MPI_Send of them while rank 0 is already in the
 *       collective (the other ranks join it). The matching receive is
 *       posted, so MPI requires the send to complete: a collective that
 *       does not drive MPI's progress while it waits deadlocks with it.
 *   mpi_shim_trust --bottom
 *       MPI_Bcast (every root), MPI_Allgather and MPI_Alltoall on
 *       MPI_BOTTOM with datatypes holding absolute addresses.
 *   mpi_shim_trust --uncommitted
 *       Under MPI_ERRORS_RETURN, MPI_Bcast, MPI_Allgather and MPI_Alltoall
 *       with a datatype that was never committed (a contiguous one, which
 *       the shim would read in place, and a vector): each call must return
 *       an error of class MPI_ERR_TYPE on every rank, not abort; then a
 *       correct call with the committed type must still work.
 *
 * Rank 0 prints "shim_trust: MODE: N checks, X calls in autoinfra (all
 * ranks), F failures" and "shim_trust: OK" or "shim_trust: FAILED"; the
 * exit status is 1 on any failure. The counters come from the shim's
 * exported symbols (0 when it is not loaded).
 */
#include <mpi.h>

#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPORTS 20

static int g_rank, g_size, g_reports;
static long g_failures, g_checks;

static void failure(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void failure(const char *fmt, ...)
{
    g_failures++;
    if (g_reports++ >= MAX_REPORTS)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "shim_trust: rank %d: ", g_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "shim_trust: out of memory (%zu bytes)\n", n);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

static void check_int(const char *what, long got, long want)
{
    g_checks++;
    if (got != want)
        failure("%s: %ld, expected %ld", what, got, want);
}

/* ------------------------------------------------------ pending send */

static unsigned char pattern(size_t i, size_t bytes) { return (unsigned char)((i * 31 + bytes) % 251); }

static void pending_send(const char *coll, size_t bytes)
{
    const int tag = 77, n = 4096; /* collective: n ints per rank */
    unsigned char *msg = xmalloc(bytes);
    int *in = xmalloc((size_t)n * sizeof *in), *out = xmalloc((size_t)n * g_size * sizeof *out);
    int gather = !strcmp(coll, "allgather");
    MPI_Request req = MPI_REQUEST_NULL;
    for (int i = 0; i < n; i++)
        in[i] = g_rank * 1000 + i % 1000;
    memset(msg, 0, bytes);
    if (g_rank == 0)
        MPI_Irecv(msg, (int)bytes, MPI_BYTE, 1, tag, MPI_COMM_WORLD, &req);
    /* The receive is posted before rank 1 sends. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 1) {
        for (size_t i = 0; i < bytes; i++)
            msg[i] = pattern(i, bytes);
        MPI_Send(msg, (int)bytes, MPI_BYTE, 0, tag, MPI_COMM_WORLD);
    }
    double t0 = MPI_Wtime();
    int rc = gather ? MPI_Allgather(in, n, MPI_INT, out, n, MPI_INT, MPI_COMM_WORLD)
                    : MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    double dt = MPI_Wtime() - t0;
    check_int("collective's return code", rc, MPI_SUCCESS);
    long bad = 0;
    for (int i = 0; i < (gather ? n * g_size : n); i++) {
        long want = gather ? (long)(i / n) * 1000 + (i % n) % 1000
                           : 1000L * g_size * (g_size - 1) / 2 + (long)g_size * (i % 1000);
        bad += out[i] != want;
    }
    g_checks++;
    if (bad)
        failure("%s with a pending %zu-byte send: %ld wrong elements", coll, bytes, bad);
    if (g_rank == 0) {
        MPI_Status st;
        MPI_Wait(&req, &st);
        int got = -1;
        MPI_Get_count(&st, MPI_BYTE, &got);
        check_int("bytes received", got, (long)bytes);
        size_t wrong = 0;
        for (size_t i = 0; i < bytes; i++)
            wrong += msg[i] != pattern(i, bytes);
        check_int("wrong bytes received", (long)wrong, 0);
        printf("shim_trust: %s with rank 1's %zu-byte MPI_Send pending: %.3f s on rank 0\n", coll,
               bytes, dt);
    }
    free(msg);
    free(in);
    free(out);
}

/* --------------------------------------------------------- MPI_BOTTOM */

/* `count` ints at `base`, as one datatype holding their absolute address
 * (MPI_Get_address): used on MPI_BOTTOM. Every second int of 2 x count,
 * so the type is not contiguous either. */
static MPI_Datatype absolute_ints(int *base, int count)
{
    MPI_Datatype vec, abs;
    MPI_Aint addr;
    MPI_Type_vector(count, 1, 2, MPI_INT, &vec);
    MPI_Get_address(base, &addr);
    int one = 1;
    MPI_Type_create_struct(1, &one, &addr, &vec, &abs);
    MPI_Type_commit(&abs);
    MPI_Type_free(&vec);
    return abs;
}

static void expect_ints(const char *what, const int *buf, int n, int stride, int (*want)(int, int),
                        int arg)
{
    long bad = 0;
    int first = -1;
    for (int i = 0; i < n; i++)
        if (buf[i * stride] != want(i, arg)) {
            bad++;
            if (first < 0)
                first = i;
        }
    g_checks++;
    if (bad)
        failure("%s: %ld wrong elements, first [%d] = %d, expected %d", what, bad, first,
                buf[first * stride], want(first, arg));
}

static int v_bcast(int i, int root) { return root * 100 + i; }
static int v_gather(int i, int per) { return (i / per) * 1000 + i % per; }
static int v_a2a(int i, int per) { return (i / per) * 1000 + g_rank * 10 + i % per; }

static void bottom(void)
{
    const int per = 5;
    char what[96];
    int *b = xmalloc(2 * sizeof(int) * per * g_size);
    for (int root = 0; root < g_size; root++) {
        for (int i = 0; i < 2 * per; i++)
            b[i] = g_rank == root ? (i % 2 ? -1 : v_bcast(i / 2, root)) : -7;
        MPI_Datatype t = absolute_ints(b, per);
        int rc = MPI_Bcast(MPI_BOTTOM, 1, t, root, MPI_COMM_WORLD);
        snprintf(what, sizeof what, "MPI_Bcast on MPI_BOTTOM, root %d", root);
        check_int(what, rc, MPI_SUCCESS);
        expect_ints(what, b, per, 2, v_bcast, root);
        MPI_Type_free(&t);
    }

    /* per ints (every second one) as one block whose extent is the
     * block's span, so that consecutive blocks follow: the receive side of
     * allgather and both sides of alltoall, at absolute addresses */
    int *s = xmalloc(2 * sizeof(int) * per * g_size);
    MPI_Datatype vec, blk, sabs, rabs;
    MPI_Type_vector(per, 1, 2, MPI_INT, &vec);
    MPI_Type_create_resized(vec, 0, (MPI_Aint)(2 * per * sizeof(int)), &blk);
    MPI_Aint saddr, raddr;
    MPI_Get_address(s, &saddr);
    MPI_Get_address(b, &raddr);
    int one = 1;
    MPI_Type_create_struct(1, &one, &saddr, &blk, &sabs);
    MPI_Type_create_struct(1, &one, &raddr, &blk, &rabs);
    MPI_Type_commit(&sabs);
    MPI_Type_commit(&rabs);

    for (int i = 0; i < per; i++)
        s[2 * i] = g_rank * 1000 + i;
    for (int i = 0; i < 2 * per * g_size; i++)
        b[i] = -7;
    MPI_Datatype st = absolute_ints(s, per);
    int rc = MPI_Allgather(MPI_BOTTOM, 1, st, MPI_BOTTOM, 1, rabs, MPI_COMM_WORLD);
    check_int("MPI_Allgather on MPI_BOTTOM", rc, MPI_SUCCESS);
    expect_ints("MPI_Allgather on MPI_BOTTOM", b, per * g_size, 2, v_gather, per);
    MPI_Type_free(&st);

    /* alltoall: block k of the send side goes to rank k */
    for (int k = 0; k < g_size; k++)
        for (int i = 0; i < per; i++)
            s[2 * (k * per + i)] = g_rank * 1000 + k * 10 + i;
    for (int i = 0; i < 2 * per * g_size; i++)
        b[i] = -7;
    rc = MPI_Alltoall(MPI_BOTTOM, 1, sabs, MPI_BOTTOM, 1, rabs, MPI_COMM_WORLD);
    check_int("MPI_Alltoall on MPI_BOTTOM", rc, MPI_SUCCESS);
    expect_ints("MPI_Alltoall on MPI_BOTTOM", b, per * g_size, 2, v_a2a, per);
    MPI_Type_free(&sabs);
    MPI_Type_free(&rabs);
    MPI_Type_free(&blk);
    MPI_Type_free(&vec);
    free(s);
    free(b);
}

/* ------------------------------------------------- uncommitted types */

static void expect_type_error(const char *what, int rc)
{
    int cls = -1;
    g_checks++;
    if (rc == MPI_SUCCESS) {
        failure("%s with an uncommitted datatype returned MPI_SUCCESS, expected MPI_ERR_TYPE",
                what);
        return;
    }
    MPI_Error_class(rc, &cls);
    if (cls != MPI_ERR_TYPE) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        failure("%s with an uncommitted datatype returned error class %d (%s), expected "
                "MPI_ERR_TYPE (%d)",
                what, cls, msg, MPI_ERR_TYPE);
    }
}

static void uncommitted(void)
{
    const int per = 4;
    int *s = xmalloc(2 * sizeof(int) * per * g_size), *r = xmalloc(2 * sizeof(int) * per * g_size);
    memset(s, 0, 2 * sizeof(int) * per * g_size);
    memset(r, 0, 2 * sizeof(int) * per * g_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (int k = 0; k < 2; k++) {
        /* contiguous: the shim would read it in place; vector: pack */
        MPI_Datatype t;
        if (k == 0)
            MPI_Type_contiguous(per, MPI_INT, &t);
        else
            MPI_Type_vector(per, 1, 2, MPI_INT, &t);
        char what[96];
        const char *kind = k == 0 ? "contiguous" : "vector";
        snprintf(what, sizeof what, "MPI_Bcast (%s)", kind);
        expect_type_error(what, MPI_Bcast(s, 1, t, 0, MPI_COMM_WORLD));
        snprintf(what, sizeof what, "MPI_Allgather (%s)", kind);
        expect_type_error(what, MPI_Allgather(s, 1, t, r, 1, t, MPI_COMM_WORLD));
        snprintf(what, sizeof what, "MPI_Alltoall (%s)", kind);
        expect_type_error(what, MPI_Alltoall(s, 1, t, r, 1, t, MPI_COMM_WORLD));
        /* the same type committed: a correct call */
        MPI_Type_commit(&t);
        for (int i = 0; i < per; i++)
            s[k ? 2 * i : i] = g_rank == 0 ? 500 + i : -1;
        snprintf(what, sizeof what, "MPI_Bcast (%s, committed)", kind);
        check_int(what, MPI_Bcast(s, 1, t, 0, MPI_COMM_WORLD), MPI_SUCCESS);
        for (int i = 0; i < per; i++)
            check_int(what, s[k ? 2 * i : i], 500 + i);
        MPI_Type_free(&t);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    free(s);
    free(r);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    const char *mode = argc > 1 ? argv[1] : "";
    void (*counts)(unsigned long long *, unsigned long long *, unsigned long long *);
    *(void **)&counts = dlsym(RTLD_DEFAULT, "autoinfra_shim_counts");
    unsigned long long calls0 = 0, calls1 = 0;
    if (counts)
        counts(&calls0, NULL, NULL);
    int ok_args = 1;
    if (!strcmp(mode, "--pending-send") && argc > 3 && g_size >= 2 &&
        (!strcmp(argv[2], "allreduce") || !strcmp(argv[2], "allgather"))) {
        for (int i = 3; i < argc; i++) {
            char *end;
            long long b = strtoll(argv[i], &end, 10);
            if (*end || b < 1 || b > (1LL << 30)) {
                ok_args = 0;
                break;
            }
            pending_send(argv[2], (size_t)b);
        }
    } else if (!strcmp(mode, "--bottom")) {
        bottom();
    } else if (!strcmp(mode, "--uncommitted")) {
        uncommitted();
    } else {
        ok_args = 0;
    }
    if (!ok_args) {
        if (!g_rank)
            fprintf(stderr, "usage: mpi_shim_trust --pending-send allreduce|allgather BYTES... "
                            "(2 ranks or more) | --bottom | --uncommitted\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (counts)
        counts(&calls1, NULL, NULL);
    long mine[3] = {g_failures, g_checks, (long)(calls1 - calls0)}, all[3] = {0};
    MPI_Reduce(mine, all, 3, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (g_rank == 0) {
        printf("shim_trust: %s: %ld checks, %ld calls in autoinfra (all ranks), %ld failures\n"
               "shim_trust: %s\n",
               mode + 2, all[1], all[2], all[0], all[0] ? "FAILED" : "OK");
        fflush(stdout);
    }
    long bad = g_failures ? 1 : 0, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any ? 1 : 0;
}
