/*
 * MPI_Alltoall of ints, counts 0 to 2^15 per pair of ranks, in place and
 * not, on MPI_COMM_WORLD, a duplicate, a communicator with the ranks
 * reversed and a split one; then with a strided send type (every second
 * int) and ints received.
 */
#include "suite.h"

#include <string.h>

static int val(int src, int dst, int i) { return src * 1000003 + dst * 1009 + i; }

static void run(MPI_Comm comm, const char *cname, int per, int in_place)
{
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    size_t total = (size_t)per * (size_t)n;
    int *in = suite_alloc(total * sizeof(int)), *out = suite_alloc(total * sizeof(int));
    for (int d = 0; d < n; d++)
        for (int i = 0; i < per; i++)
            in[(size_t)d * per + i] = val(r, d, i);
    if (in_place) {
        memcpy(out, in, total * sizeof(int));
        MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, per, MPI_INT, comm);
    } else {
        for (size_t i = 0; i < total; i++)
            out[i] = -1;
        MPI_Alltoall(in, per, MPI_INT, out, per, MPI_INT, comm);
    }
    for (size_t i = 0; i < total; i++) {
        int s = (int)(i / (size_t)per), at = (int)(i % (size_t)per);
        if (out[i] != val(s, r, at)) {
            suite_error("%s per %d%s: element %zu = %d, expected %d", cname, per,
                        in_place ? " in place" : "", i, out[i], val(s, r, at));
            break;
        }
    }
    free(in);
    free(out);
}

static void strided(MPI_Comm comm, const char *cname)
{
    int r, n, per = 64;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    MPI_Datatype vec, blk;
    MPI_Type_vector(per, 1, 2, MPI_INT, &vec);
    MPI_Type_create_resized(vec, 0, (MPI_Aint)(2 * per * sizeof(int)), &blk);
    MPI_Type_commit(&blk);
    int *in = suite_alloc(2 * (size_t)per * n * sizeof(int)), *out = suite_alloc((size_t)per * n * sizeof(int));
    for (int d = 0; d < n; d++)
        for (int i = 0; i < per; i++) {
            in[2 * ((size_t)d * per + i)] = val(r, d, i);
            in[2 * ((size_t)d * per + i) + 1] = -9;
        }
    MPI_Alltoall(in, 1, blk, out, per, MPI_INT, comm);
    for (int i = 0; i < per * n; i++)
        if (out[i] != val(i / per, r, i % per)) {
            suite_error("%s strided: element %d = %d, expected %d", cname, i, out[i], val(i / per, r, i % per));
            break;
        }
    MPI_Type_free(&vec);
    MPI_Type_free(&blk);
    free(in);
    free(out);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm dup, rev, half;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    const int per[] = {0, 1, 7, 1024, 1 << 15};
    for (size_t k = 0; k < sizeof per / sizeof per[0]; k++)
        for (int ip = 0; ip < 2; ip++) {
            run(MPI_COMM_WORLD, "world", per[k], ip);
            run(dup, "dup", per[k], ip);
            run(rev, "reversed", per[k], ip);
            run(half, "half", per[k], ip);
        }
    strided(MPI_COMM_WORLD, "world");
    strided(dup, "dup");
    MPI_Comm_free(&dup);
    MPI_Comm_free(&rev);
    MPI_Comm_free(&half);
    return suite_finish();
}
