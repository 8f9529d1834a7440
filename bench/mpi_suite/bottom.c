/*
 * Collectives on MPI_BOTTOM: struct datatypes built from absolute
 * addresses (MPI_Get_address) of scattered variables, a heap block and a
 * stack array, used in MPI_Bcast (every root), MPI_Allgather and
 * MPI_Alltoall with MPI_BOTTOM as the buffer on one side or both.
 */
#include "suite.h"

#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);

    /* bcast: an int, a double on the heap, 3 shorts on the stack */
    int one_int;
    double *heap = suite_alloc(sizeof(double));
    short three[3];
    MPI_Aint at[3];
    MPI_Get_address(&one_int, &at[0]);
    MPI_Get_address(heap, &at[1]);
    MPI_Get_address(three, &at[2]);
    int lens[3] = {1, 1, 3};
    MPI_Datatype tys[3] = {MPI_INT, MPI_DOUBLE, MPI_SHORT}, scattered;
    MPI_Type_create_struct(3, lens, at, tys, &scattered);
    MPI_Type_commit(&scattered);
    for (int root = 0; root < n; root++) {
        one_int = r == root ? 1000 + root : -1;
        *heap = r == root ? root + 0.5 : -1;
        for (int i = 0; i < 3; i++)
            three[i] = (short)(r == root ? 10 * root + i : -1);
        MPI_Bcast(MPI_BOTTOM, 1, scattered, root, MPI_COMM_WORLD);
        if (one_int != 1000 + root || *heap != root + 0.5 || three[0] != 10 * root ||
            three[2] != 10 * root + 2)
            suite_error("bcast on MPI_BOTTOM from root %d: %d %g %d %d", root, one_int, *heap,
                        three[0], three[2]);
    }
    MPI_Type_free(&scattered);
    free(heap);

    /* allgather: send 4 ints from MPI_BOTTOM, receive into a plain array;
     * then send from a plain array and receive on MPI_BOTTOM */
    int mine[4], *all = suite_alloc((size_t)n * 4 * sizeof(int));
    for (int i = 0; i < 4; i++)
        mine[i] = r * 10 + i;
    MPI_Aint a;
    MPI_Get_address(mine, &a);
    int four = 4;
    MPI_Datatype it = MPI_INT, absmine;
    MPI_Type_create_struct(1, &four, &a, &it, &absmine);
    MPI_Type_commit(&absmine);
    MPI_Allgather(MPI_BOTTOM, 1, absmine, all, 4, MPI_INT, MPI_COMM_WORLD);
    for (int i = 0; i < 4 * n; i++)
        if (all[i] != (i / 4) * 10 + i % 4) {
            suite_error("allgather from MPI_BOTTOM: [%d] = %d", i, all[i]);
            break;
        }
    memset(all, 0xff, (size_t)n * 4 * sizeof(int));
    MPI_Get_address(all, &a);
    /* the receive side: one block of 4 ints per rank, the blocks placed
     * from the array's absolute address */
    MPI_Datatype blk, rblk;
    int onecount = 1;
    MPI_Type_contiguous(4, MPI_INT, &blk);
    MPI_Type_create_struct(1, &onecount, &a, &blk, &rblk);
    MPI_Type_commit(&rblk);
    MPI_Allgather(mine, 4, MPI_INT, MPI_BOTTOM, 1, rblk, MPI_COMM_WORLD);
    for (int i = 0; i < 4 * n; i++)
        if (all[i] != (i / 4) * 10 + i % 4) {
            suite_error("allgather into MPI_BOTTOM: [%d] = %d", i, all[i]);
            break;
        }

    /* alltoall, both sides on MPI_BOTTOM */
    int *s = suite_alloc((size_t)n * 4 * sizeof(int));
    for (int i = 0; i < 4 * n; i++)
        s[i] = r * 100 + i;
    MPI_Aint sa;
    MPI_Get_address(s, &sa);
    MPI_Datatype sblk;
    MPI_Type_create_struct(1, &onecount, &sa, &blk, &sblk);
    MPI_Type_commit(&sblk);
    memset(all, 0xff, (size_t)n * 4 * sizeof(int));
    MPI_Alltoall(MPI_BOTTOM, 1, sblk, MPI_BOTTOM, 1, rblk, MPI_COMM_WORLD);
    for (int i = 0; i < 4 * n; i++) {
        int src = i / 4, want = src * 100 + r * 4 + i % 4;
        if (all[i] != want) {
            suite_error("alltoall on MPI_BOTTOM: [%d] = %d, expected %d", i, all[i], want);
            break;
        }
    }
    MPI_Type_free(&sblk);
    MPI_Type_free(&rblk);
    MPI_Type_free(&absmine);
    MPI_Type_free(&blk);
    free(s);
    free(all);
    return suite_finish();
}
