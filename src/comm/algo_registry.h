/*
 * The algorithm registry as the layers above comm see it (tune's learner
 * enumerates its arms here, the exporters map names and segment sizes):
 * the algorithms of each collective, by index or by name, and the
 * parameters their names leave implicit. The algorithms themselves and
 * their building blocks are comm's own (comm/algo/).
 */
#ifndef AI_COMM_ALGO_REGISTRY_H
#define AI_COMM_ALGO_REGISTRY_H

#include "comm/comm.h"

/* Algorithms of `coll`, in the order ai_coll_algo_name() lists them and
 * the learner explores them. comm_algo_at returns NULL past the end;
 * comm_algo_find (case-insensitive) NULL for an unknown name. */
int comm_algo_count(ai_coll coll);
const coll_algo *comm_algo_at(ai_coll coll, int index);
const coll_algo *comm_algo_find(ai_coll coll, const char *name);

/* Whether the direct allreduce (algo/allreduce.c) runs as itself here:
 * one host, every rank on it, shared memory (elsewhere it runs
 * recursive_doubling). */
int comm_shm_direct_ok(const ai_comm *c);
/* The bytes each rank reads from the other ranks' slots in a direct
 * allreduce of `bytes`: (p - 1) x bytes where every rank reduces every
 * slot (2 ranks, or under 96 KiB of such reads), 2 (p - 1) / p x bytes
 * where it runs as a reduce-scatter. */
size_t comm_direct_reads(const ai_comm *c, size_t bytes);

/* The segment a pipelined algorithm (binary_tree, chain, weighted) uses
 * when chunk_bytes is 0. Its value and reason: comm/algo/core.h. */
#define COMM_ALGO_DEFAULT_SEGMENT ((size_t)64 << 10)

#endif
