/*
 * MPI_Allgather of ints and doubles, counts 0 to 2^17 per rank, in place
 * (each rank's block already in the receive buffer) and not, with a send
 * type that differs from the receive type but has the same signature (a
 * contiguous type of n ints sent, n ints received), on MPI_COMM_WORLD, a
 * duplicate and a split communicator.
 */
#include "suite.h"

#include <string.h>

static int val(int r, int i) { return r * 100003 + i; }

static void run(MPI_Comm comm, const char *cname, int per, int mode)
{
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    size_t total = (size_t)per * (size_t)n;
    int *in = suite_alloc((size_t)per * sizeof(int)), *out = suite_alloc(total * sizeof(int));
    double *din = suite_alloc((size_t)per * sizeof(double)), *dout = suite_alloc(total * sizeof(double));
    for (int i = 0; i < per; i++) {
        in[i] = val(r, i);
        din[i] = val(r, i) * 0.5;
    }
    for (size_t i = 0; i < total; i++) {
        out[i] = -1;
        dout[i] = -1;
    }
    if (mode == 1) { /* in place */
        memcpy(out + (size_t)r * per, in, (size_t)per * sizeof(int));
        memcpy(dout + (size_t)r * per, din, (size_t)per * sizeof(double));
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, per, MPI_INT, comm);
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, dout, per, MPI_DOUBLE, comm);
    } else if (mode == 2 && per > 0) { /* one contiguous element sent */
        MPI_Datatype blk;
        MPI_Type_contiguous(per, MPI_INT, &blk);
        MPI_Type_commit(&blk);
        MPI_Allgather(in, 1, blk, out, per, MPI_INT, comm);
        MPI_Type_free(&blk);
        MPI_Allgather(din, per, MPI_DOUBLE, dout, per, MPI_DOUBLE, comm);
    } else {
        MPI_Allgather(in, per, MPI_INT, out, per, MPI_INT, comm);
        MPI_Allgather(din, per, MPI_DOUBLE, dout, per, MPI_DOUBLE, comm);
    }
    for (size_t i = 0; i < total; i++) {
        int q = (int)(i / (size_t)per), at = (int)(i % (size_t)per);
        if (out[i] != val(q, at) || dout[i] != val(q, at) * 0.5) {
            suite_error("%s per %d mode %d: element %zu = %d / %g, expected %d", cname, per, mode, i,
                        out[i], dout[i], val(q, at));
            break;
        }
    }
    free(in);
    free(out);
    free(din);
    free(dout);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm dup, half;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    const int per[] = {0, 1, 5, 1000, 1 << 17};
    for (size_t k = 0; k < sizeof per / sizeof per[0]; k++)
        for (int mode = 0; mode < 3; mode++) {
            run(MPI_COMM_WORLD, "world", per[k], mode);
            run(dup, "dup", per[k], mode);
            run(half, "half", per[k], mode);
        }
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    return suite_finish();
}
