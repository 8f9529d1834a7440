/*
 * MPI_Allreduce and MPI_Reduce_scatter_block with a non-commutative
 * user-defined op: 2x2 integer matrix products, which MPI must apply in
 * rank order. Every rank contributes a different matrix, so any other
 * order gives another product.
 */
#include "suite.h"

typedef struct { int a, b, c, d; } mat;

/* inout = in x inout (in comes from the lower ranks) */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    mat *x = in, *y = inout;
    for (int i = 0; i < *len; i++) {
        mat p = {x[i].a * y[i].a + x[i].b * y[i].c, x[i].a * y[i].b + x[i].b * y[i].d,
                 x[i].c * y[i].a + x[i].d * y[i].c, x[i].c * y[i].b + x[i].d * y[i].d};
        y[i] = p;
    }
}

/* Rank r's matrix for element i: unimodular, so products stay small. */
static mat of(int r, int i)
{
    mat m = {1, (r + i) % 3, 0, 1};
    if ((r + i) % 2)
        m = (mat){1, 0, (r + 2 * i) % 3, 1};
    return m;
}

static mat mul(mat x, mat y)
{
    int one = 1;
    matmul(&x, &y, &one, NULL);
    return y;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Datatype mt;
    MPI_Type_contiguous(4, MPI_INT, &mt);
    MPI_Type_commit(&mt);
    MPI_Op op;
    MPI_Op_create(matmul, 0, &op);
    const int counts[] = {1, 5, 1000};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        int c = counts[k];
        mat *in = suite_alloc((size_t)c * n * sizeof(mat)), *out = suite_alloc((size_t)c * n * sizeof(mat));
        for (int i = 0; i < c * n; i++)
            in[i] = of(r, i);
        MPI_Allreduce(in, out, c, mt, op, MPI_COMM_WORLD);
        for (int i = 0; i < c; i++) {
            mat want = of(0, i);
            for (int q = 1; q < n; q++)
                want = mul(want, of(q, i));
            if (out[i].a != want.a || out[i].b != want.b || out[i].c != want.c || out[i].d != want.d) {
                suite_error("allreduce count %d: element %d out of rank order", c, i);
                break;
            }
        }
        MPI_Reduce_scatter_block(in, out, c, mt, op, MPI_COMM_WORLD);
        for (int i = 0; i < c; i++) {
            int at = r * c + i;
            mat want = of(0, at);
            for (int q = 1; q < n; q++)
                want = mul(want, of(q, at));
            if (out[i].a != want.a || out[i].b != want.b || out[i].c != want.c || out[i].d != want.d) {
                suite_error("reduce_scatter_block count %d: element %d out of rank order", c, i);
                break;
            }
        }
        free(in);
        free(out);
    }
    MPI_Op_free(&op);
    MPI_Type_free(&mt);
    return suite_finish();
}
