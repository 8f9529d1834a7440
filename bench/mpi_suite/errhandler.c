/*
 * Erroneous collective arguments under MPI_ERRORS_RETURN on a duplicate of
 * MPI_COMM_WORLD: each call must return an error of the class the MPI
 * standard names (every rank passes the same bad argument, so MPI finds
 * it before any communication), and the communicator must still work
 * afterwards: an uncommitted derived type (MPI_ERR_TYPE), a negative
 * count (MPI_ERR_COUNT), a root out of range (MPI_ERR_ROOT) and
 * MPI_OP_NULL (MPI_ERR_OP).
 */
#include "suite.h"

static void expect_class(const char *what, int rc, int cls_want)
{
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &cls);
    if (cls != cls_want)
        suite_error("%s: error class %d, expected %d", what, cls, cls_want);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    int *a = suite_alloc(64 * (size_t)n * sizeof(int)), *b = suite_alloc(64 * (size_t)n * sizeof(int));
    for (int i = 0; i < 64 * n; i++)
        a[i] = b[i] = i;

    MPI_Datatype contig, vec;
    MPI_Type_contiguous(4, MPI_INT, &contig);
    MPI_Type_vector(4, 1, 2, MPI_INT, &vec);
    const MPI_Datatype raw[2] = {contig, vec};
    for (int k = 0; k < 2; k++) {
        MPI_Datatype t = raw[k];
        expect_class("bcast, uncommitted type", MPI_Bcast(a, 2, t, 0, c), MPI_ERR_TYPE);
        expect_class("allgather, uncommitted type", MPI_Allgather(a, 1, t, b, 1, t, c), MPI_ERR_TYPE);
        expect_class("alltoall, uncommitted type", MPI_Alltoall(a, 1, t, b, 1, t, c), MPI_ERR_TYPE);
    }
    MPI_Type_free(&contig);
    MPI_Type_free(&vec);

    expect_class("bcast, count -1", MPI_Bcast(a, -1, MPI_INT, 0, c), MPI_ERR_COUNT);
    expect_class("bcast, root = size", MPI_Bcast(a, 4, MPI_INT, n, c), MPI_ERR_ROOT);
    expect_class("bcast, root -5", MPI_Bcast(a, 4, MPI_INT, -5, c), MPI_ERR_ROOT);
    expect_class("allreduce, MPI_OP_NULL", MPI_Allreduce(a, b, 4, MPI_INT, MPI_OP_NULL, c), MPI_ERR_OP);

    /* still usable */
    int v = r + 1, s = 0;
    if (MPI_Allreduce(&v, &s, 1, MPI_INT, MPI_SUM, c) != MPI_SUCCESS || s != n * (n + 1) / 2)
        suite_error("allreduce after the errors: %d, expected %d", s, n * (n + 1) / 2);
    int x = r == 0 ? 42 : 0;
    if (MPI_Bcast(&x, 1, MPI_INT, 0, c) != MPI_SUCCESS || x != 42)
        suite_error("bcast after the errors: %d", x);
    MPI_Comm_free(&c);
    free(a);
    free(b);
    return suite_finish();
}
