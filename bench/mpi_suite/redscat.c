/*
 * MPI_Reduce_scatter_block and MPI_Reduce_scatter (equal and unequal
 * counts) with sum, max and a user-defined op on ints and doubles, in
 * place and not, counts 0 to 2^16 per rank, on MPI_COMM_WORLD and a
 * duplicate.
 */
#include "suite.h"

#include <string.h>

static void user_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] += ((int *)in)[i];
}

static int val(int r, size_t i) { return (int)((r * 13 + i * 7) % 29); }

static void block(MPI_Comm comm, const char *cname, int per, int opk, int in_place, MPI_Op user)
{
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    size_t total = (size_t)per * n;
    int *in = suite_alloc(total * sizeof(int)), *out = suite_alloc(total * sizeof(int));
    double *din = suite_alloc(total * sizeof(double)), *dout = suite_alloc(total * sizeof(double));
    for (size_t i = 0; i < total; i++) {
        in[i] = val(r, i);
        din[i] = val(r, i);
        out[i] = -1;
        dout[i] = -1;
    }
    MPI_Op op = opk == 0 ? MPI_SUM : opk == 1 ? MPI_MAX : user;
    if (in_place) {
        memcpy(out, in, total * sizeof(int));
        MPI_Reduce_scatter_block(MPI_IN_PLACE, out, per, MPI_INT, op, comm);
    } else {
        MPI_Reduce_scatter_block(in, out, per, MPI_INT, op, comm);
    }
    if (opk < 2)
        MPI_Reduce_scatter_block(din, dout, per, MPI_DOUBLE, op, comm);
    for (int i = 0; i < per; i++) {
        size_t at = (size_t)r * per + i;
        int want = opk == 1 ? 0 : 0;
        for (int q = 0; q < n; q++)
            want = opk == 1 ? (val(q, at) > want ? val(q, at) : want) : want + val(q, at);
        if (out[i] != want || (opk < 2 && dout[i] != want)) {
            suite_error("%s block per %d op %d%s: [%d] = %d / %g, expected %d", cname, per, opk,
                        in_place ? " in place" : "", i, out[i], dout[i], want);
            break;
        }
    }
    free(in);
    free(out);
    free(din);
    free(dout);
}

static void varying(MPI_Comm comm, const char *cname)
{
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    int *counts = suite_alloc((size_t)n * sizeof(int));
    size_t total = 0;
    for (int q = 0; q < n; q++)
        total += (size_t)(counts[q] = 100 * q + 3);
    int *in = suite_alloc(total * sizeof(int)), *out = suite_alloc((size_t)counts[r] * sizeof(int));
    for (size_t i = 0; i < total; i++)
        in[i] = val(r, i);
    MPI_Reduce_scatter(in, out, counts, MPI_INT, MPI_SUM, comm);
    size_t first = 0;
    for (int q = 0; q < r; q++)
        first += (size_t)counts[q];
    for (int i = 0; i < counts[r]; i++) {
        int want = 0;
        for (int q = 0; q < n; q++)
            want += val(q, first + i);
        if (out[i] != want) {
            suite_error("%s reduce_scatter: [%d] = %d, expected %d", cname, i, out[i], want);
            break;
        }
    }
    free(counts);
    free(in);
    free(out);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Op user;
    MPI_Op_create(user_sum, 1, &user);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    const int per[] = {0, 1, 9, 4096, 1 << 16};
    for (size_t k = 0; k < sizeof per / sizeof per[0]; k++)
        for (int opk = 0; opk < 3; opk++)
            for (int ip = 0; ip < 2; ip++) {
                block(MPI_COMM_WORLD, "world", per[k], opk, ip, user);
                block(dup, "dup", per[k], opk, ip, user);
            }
    varying(MPI_COMM_WORLD, "world");
    varying(dup, "dup");
    MPI_Comm_free(&dup);
    MPI_Op_free(&user);
    return suite_finish();
}
