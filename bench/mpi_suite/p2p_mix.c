/*
 * Point-to-point traffic in flight across collectives. Each rank posts
 * nonblocking receives from its ring neighbours, then sends to them with
 * blocking MPI_Send (8 KiB to 4 MiB, past every eager limit) while the
 * lower half of the ranks is already in MPI_Allreduce / MPI_Bcast /
 * MPI_Allgather. The receives were posted before the sends, so MPI must
 * complete the sends whatever the receivers do next; the collectives'
 * results and the messages are checked.
 */
#include "suite.h"

#include <string.h>

static unsigned char pat(int from, size_t i) { return (unsigned char)((from * 31 + i * 7) % 253); }

static void round_of(size_t bytes, int coll)
{
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int left = (r + n - 1) % n, right = (r + 1) % n;
    unsigned char *rx = suite_alloc(bytes), *tx = suite_alloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        tx[i] = pat(r, i);
    memset(rx, 0, bytes);
    MPI_Request req;
    MPI_Irecv(rx, (int)bytes, MPI_BYTE, left, 5, MPI_COMM_WORLD, &req);
    MPI_Barrier(MPI_COMM_WORLD);
    /* the upper half sends first, then joins the collective; the lower
     * half enters the collective first and sends after it */
    int upper = r >= n / 2;
    if (upper)
        MPI_Send(tx, (int)bytes, MPI_BYTE, right, 5, MPI_COMM_WORLD);
    int v[256], out[256 * 64];
    for (int i = 0; i < 256; i++)
        v[i] = r + i;
    if (coll == 0) {
        MPI_Allreduce(v, out, 256, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < 256; i++)
            if (out[i] != n * (n - 1) / 2 + n * i) {
                suite_error("allreduce with sends pending (%zu bytes): [%d] = %d", bytes, i, out[i]);
                break;
            }
    } else if (coll == 1) {
        for (int i = 0; i < 256; i++)
            out[i] = r == n - 1 ? 7 * i : -1;
        MPI_Bcast(out, 256, MPI_INT, n - 1, MPI_COMM_WORLD);
        for (int i = 0; i < 256; i++)
            if (out[i] != 7 * i) {
                suite_error("bcast with sends pending (%zu bytes): [%d] = %d", bytes, i, out[i]);
                break;
            }
    } else if (n <= 64) {
        MPI_Allgather(v, 256, MPI_INT, out, 256, MPI_INT, MPI_COMM_WORLD);
        for (int i = 0; i < 256 * n; i++)
            if (out[i] != i / 256 + i % 256) {
                suite_error("allgather with sends pending (%zu bytes): [%d] = %d", bytes, i, out[i]);
                break;
            }
    }
    if (!upper)
        MPI_Send(tx, (int)bytes, MPI_BYTE, right, 5, MPI_COMM_WORLD);
    MPI_Status st;
    MPI_Wait(&req, &st);
    for (size_t i = 0; i < bytes; i++)
        if (rx[i] != pat(left, i)) {
            suite_error("message of %zu bytes from rank %d: byte %zu wrong", bytes, left, i);
            break;
        }
    free(rx);
    free(tx);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    const size_t sizes[] = {8 << 10, 64 << 10, 1 << 20, 4 << 20};
    if (n > 1)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
            for (int coll = 0; coll < 3; coll++)
                round_of(sizes[k], coll);
    return suite_finish();
}
