/*
 * oneCCL behind bench/mpi_bench.c: built together with it (bench/vs-ompi
 * compiles `mpicxx -DMPI_BENCH_CCL mpi_bench.c ccl_bench.cpp` with Intel
 * MPI's wrapper and links oneCCL's static CPU library), so oneCCL is timed,
 * checked and reported exactly as the MPIs are. MPI starts the job and
 * carries oneCCL's key-value store address from rank 0; the timed calls are
 * oneCCL's own (ccl::allreduce, ...), whose algorithm oneCCL's defaults or
 * CCL_ALLREDUCE, CCL_ALLGATHER, ... choose.
 *
 * The PyPI package ships libccl.so.1 without the libccl.so.2 it needs, so
 * the static CPU library is linked; it refers to Intel's ITT tracing hooks
 * and to two Intel compiler helpers that only Intel's compiler runtime
 * defines. They are defined here: ITT hooks as null pointers (oneCCL
 * tests each before calling it: tracing off), the helpers as the C
 * library's memcpy and memset.
 */
#include <mpi.h>
#include <oneapi/ccl.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>

extern "C" {
void *__itt_domain_create_ptr__3_0, *__itt_event_create_ptr__3_0, *__itt_event_end_ptr__3_0,
    *__itt_event_start_ptr__3_0, *__itt_metadata_add_ptr__3_0,
    *__itt_string_handle_create_ptr__3_0, *__itt_task_begin_ptr__3_0, *__itt_task_end_ptr__3_0,
    *__itt_thread_set_name_ptr__3_0;
void *_intel_fast_memcpy(void *d, const void *s, size_t n) { return std::memcpy(d, s, n); }
void *_intel_fast_memset(void *d, int c, size_t n) { return std::memset(d, c, n); }

void ccl_bench_setup(int rank, int size);
void ccl_bench_run(int coll, float *in, float *out, size_t count, size_t per);
void ccl_bench_finish(void);
}

static std::unique_ptr<ccl::communicator> g_comm;

void ccl_bench_setup(int rank, int size)
{
    try {
        ccl::init();
        ccl::shared_ptr_class<ccl::kvs> kvs;
        ccl::kvs::address_type addr;
        if (rank == 0) {
            kvs = ccl::create_main_kvs();
            addr = kvs->get_address();
        }
        MPI_Bcast(addr.data(), (int)addr.size(), MPI_BYTE, 0, MPI_COMM_WORLD);
        if (rank != 0)
            kvs = ccl::create_kvs(addr);
        g_comm.reset(new ccl::communicator(ccl::create_communicator(size, rank, kvs)));
    } catch (const std::exception &e) {
        std::fprintf(stderr, "mpi_bench: rank %d: oneCCL set-up failed: %s\n", rank, e.what());
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

/* coll: mpi_bench.c's enum coll (allreduce, allgather, reduce_scatter,
 * broadcast, reduce, alltoall). */
void ccl_bench_run(int coll, float *in, float *out, size_t count, size_t per)
{
    ccl::communicator &c = *g_comm;
    try {
        switch (coll) {
        case 0: ccl::allreduce(in, out, count, ccl::reduction::sum, c).wait(); break;
        case 1: ccl::allgather(in, out, per, c).wait(); break;
        case 2: ccl::reduce_scatter(in, out, per, ccl::reduction::sum, c).wait(); break;
        case 3: ccl::broadcast(in, count, 0, c).wait(); break;
        case 4: ccl::reduce(in, out, count, ccl::reduction::sum, 0, c).wait(); break;
        case 5: ccl::alltoall(in, out, per, c).wait(); break;
        default: std::abort();
        }
    } catch (const std::exception &e) {
        std::fprintf(stderr, "mpi_bench: oneCCL collective failed: %s\n", e.what());
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

void ccl_bench_finish(void)
{
    g_comm.reset();
}
