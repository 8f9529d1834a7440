/*
 * MPI_Bcast from every root, of 1 element up to 4 MiB of bytes, ints and
 * doubles, of a strided vector type and of a struct type (int + double),
 * on MPI_COMM_WORLD, a duplicate and a split communicator; every element
 * checked on every rank, the gaps of the strided type left alone.
 */
#include "suite.h"

#include <stddef.h>
#include <string.h>

static void bytes_ints_doubles(MPI_Comm comm, const char *cname)
{
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    const int counts[] = {1, 3, 1024, 100000, 1 << 20};
    for (int root = 0; root < n; root++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            int c = counts[k];
            unsigned char *b = suite_alloc((size_t)c * 4);
            int *ib = suite_alloc((size_t)c * sizeof(int));
            double *db = suite_alloc((size_t)c * sizeof(double));
            for (int i = 0; i < c; i++) {
                b[i] = r == root ? (unsigned char)(i * 7 + root) : 0;
                ib[i] = r == root ? i * 3 - root : -1;
                db[i] = r == root ? i * 0.5 + root : -1.0;
            }
            MPI_Bcast(b, c, MPI_BYTE, root, comm);
            MPI_Bcast(ib, c, MPI_INT, root, comm);
            MPI_Bcast(db, c, MPI_DOUBLE, root, comm);
            for (int i = 0; i < c; i++)
                if (b[i] != (unsigned char)(i * 7 + root) || ib[i] != i * 3 - root ||
                    db[i] != i * 0.5 + root) {
                    suite_error("%s root %d count %d: element %d wrong", cname, root, c, i);
                    break;
                }
            free(b);
            free(ib);
            free(db);
        }
}

static void derived(MPI_Comm comm, const char *cname)
{
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    MPI_Datatype vec, st;
    MPI_Type_vector(100, 2, 5, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    struct item { int a; double b; } items[50];
    int lens[2] = {1, 1};
    MPI_Aint disp[2] = {offsetof(struct item, a), offsetof(struct item, b)};
    MPI_Datatype tys[2] = {MPI_INT, MPI_DOUBLE}, raw;
    MPI_Type_create_struct(2, lens, disp, tys, &raw);
    MPI_Type_create_resized(raw, 0, sizeof(struct item), &st);
    MPI_Type_commit(&st);
    int *v = suite_alloc(3 * 500 * sizeof(int));
    static char covered[3 * 500];
    for (int root = 0; root < n; root++) {
        for (int i = 0; i < 3 * 500; i++)
            v[i] = r == root ? i : -5;
        for (int i = 0; i < 50; i++) {
            items[i].a = r == root ? i + root : 0;
            items[i].b = r == root ? i * 0.25 : 0;
        }
        MPI_Bcast(v, 3, vec, root, comm);
        MPI_Bcast(items, 50, st, root, comm);
        /* element j of the vector type starts at j x its extent; the
         * ints it covers get the root's values, the gaps keep -5 */
        MPI_Aint lb, ext;
        MPI_Type_get_extent(vec, &lb, &ext);
        int step = (int)(ext / (MPI_Aint)sizeof(int));
        memset(covered, 0, sizeof covered);
        for (int j = 0; j < 3; j++)
            for (int blk = 0; blk < 100; blk++)
                covered[j * step + blk * 5] = covered[j * step + blk * 5 + 1] = 1;
        for (int at = 0; at < 3 * 500; at++) {
            int want = covered[at] || r == root ? at : -5;
            if (v[at] != want) {
                suite_error("%s vector root %d: int %d = %d, expected %d", cname, root, at, v[at], want);
                break;
            }
        }
        for (int i = 0; i < 50; i++)
            if (items[i].a != i + root || items[i].b != i * 0.25) {
                suite_error("%s struct root %d: item %d wrong", cname, root, i);
                break;
            }
    }
    free(v);
    MPI_Type_free(&vec);
    MPI_Type_free(&raw);
    MPI_Type_free(&st);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm dup, half;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
    bytes_ints_doubles(MPI_COMM_WORLD, "world");
    bytes_ints_doubles(dup, "dup");
    bytes_ints_doubles(half, "half");
    derived(MPI_COMM_WORLD, "world");
    derived(half, "half");
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    return suite_finish();
}
