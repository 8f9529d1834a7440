/*
 * libFuzzer harness for the spec loader (src/topo/topo_spec.c): every
 * input is parsed as JSON the way topo_json_load_file does (duplicate keys
 * rejected) and handed to the cluster, model and training loaders alike.
 * Whatever the bytes, a loader must return a status (AI_OK or an error
 * with a message), never crash, hang, leak or trip UBSan; a cluster it
 * accepts must be self-consistent (devices, nodes and pools add up).
 * Built and run by `make fuzz-spec` (fuzz/spec/run).
 */
#include "topo/topo.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_cluster(const topo_cluster *c)
{
    long devices = 0, pooled = 0;
    for (int g = 0; g < c->ngroups; g++)
        devices += (long)c->groups[g].count * c->groups[g].devices_per_node;
    for (int p = 0; p < c->npools; p++)
        pooled += c->pools[p].nodes;
    if (devices != c->devices || pooled != c->nnodes || c->devices <= 0)
        abort();
    for (int i = 0; i < c->nnodes; i++)
        if (c->nodes[i].nic_count < 1 || !(c->nodes[i].nic_bw_Gbps > 0))
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t err;
    json_t *doc = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &err);
    if (!doc)
        return 0;
    topo_cluster *c = NULL;
    if (topo_cluster_from_json(doc, "fuzz.json", &c) == AI_OK) {
        check_cluster(c);
        topo_cluster_free(c);
    } else if (c || !ai_last_error()[0]) {
        abort(); /* an error must leave no cluster and say what was wrong */
    }
    topo_model m;
    if (topo_model_from_json(doc, "fuzz.json", &m) != AI_OK && !ai_last_error()[0])
        abort();
    topo_training t;
    if (topo_training_from_json(doc, "fuzz.json", &t) != AI_OK && !ai_last_error()[0])
        abort();
    util_clear_error();
    json_decref(doc);
    return 0;
}
