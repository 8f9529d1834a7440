/*
 * Many small collectives back to back, intercepted kinds (allreduce,
 * bcast, allgather) interleaved with kinds an interposer would leave to
 * MPI (barrier, reduce, scan, gather) on the same communicator, so that
 * their order must hold: 2100 calls, each result checked.
 */
#include "suite.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int *g = suite_alloc((size_t)n * 2 * sizeof(int));
    for (int it = 0; it < 2100; it++) {
        int v = r + it, s = -1;
        switch (it % 7) {
        case 0:
            MPI_Allreduce(&v, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            if (s != n * (n - 1) / 2 + n * it)
                suite_error("call %d allreduce: %d", it, s);
            break;
        case 1: {
            long long b[2] = {r == it % n ? it : -1, r == it % n ? -it : -1};
            MPI_Bcast(b, 2, MPI_LONG_LONG, it % n, MPI_COMM_WORLD);
            if (b[0] != it || b[1] != -it)
                suite_error("call %d bcast: %lld %lld", it, b[0], b[1]);
            break;
        }
        case 2: {
            int two[2] = {r, it};
            MPI_Allgather(two, 2, MPI_INT, g, 2, MPI_INT, MPI_COMM_WORLD);
            for (int q = 0; q < n; q++)
                if (g[2 * q] != q || g[2 * q + 1] != it) {
                    suite_error("call %d allgather: rank %d's block wrong", it, q);
                    break;
                }
            break;
        }
        case 3:
            MPI_Barrier(MPI_COMM_WORLD);
            break;
        case 4:
            MPI_Reduce(&v, &s, 1, MPI_INT, MPI_MAX, n - 1, MPI_COMM_WORLD);
            if (r == n - 1 && s != n - 1 + it)
                suite_error("call %d reduce: %d", it, s);
            break;
        case 5:
            MPI_Scan(&v, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            if (s != r * (r + 1) / 2 + (r + 1) * it)
                suite_error("call %d scan: %d", it, s);
            break;
        default:
            MPI_Gather(&v, 1, MPI_INT, g, 1, MPI_INT, 0, MPI_COMM_WORLD);
            if (r == 0)
                for (int q = 0; q < n; q++)
                    if (g[q] != q + it) {
                        suite_error("call %d gather: [%d] = %d", it, q, g[q]);
                        break;
                    }
        }
    }
    free(g);
    return suite_finish();
}
