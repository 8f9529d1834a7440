/* topo layer: spec loading, validation messages, catalog, pools. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "topo/topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

static const char *src_dir(void)
{
    const char *d = getenv("AUTOINFRA_SOURCE_DIR");
    return d ? d : ".";
}

/* Write `text` to a fresh temp file; returns its path (static buffer). */
static const char *write_tmp(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ai_test_topo_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_catalog(void **state)
{
    (void)state;
    const char *required[] = {"A100-SXM4-80GB", "H100-SXM5-80GB", "H200", "B200", "MI300X", "Ascend-910B", "cpu"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        const topo_device *d = topo_catalog_find(required[i]);
        assert_non_null(d);
        assert_true(d->memory_GB > 0 && d->memory_bw_GBps > 0);
    }
    /* Aliases and case-insensitivity; dense (not sparse) peaks. */
    const topo_device *h = topo_catalog_find("h100");
    assert_non_null(h);
    assert_string_equal(h->name, "H100-SXM5-80GB");
    assert_true(h->peak_tflops[TOPO_BF16] == 989);
    assert_true(topo_catalog_find("a100")->peak_tflops[TOPO_FP16] == 312);
    assert_null(topo_catalog_find("no-such-gpu"));
}

static void test_example_specs_load(void **state)
{
    (void)state;
    const char *names[] = {"h1", "h2", "h3", "bench4096"};
    for (size_t i = 0; i < 4; i++) {
        char p[512];
        topo_cluster *c = NULL;
        topo_model m;
        topo_training t;
        snprintf(p, sizeof p, "%s/examples/%s/cluster.json", src_dir(), names[i]);
        assert_int_equal(topo_cluster_load(p, &c), AI_OK);
        assert_true(c->devices > 0);
        topo_cluster_free(c);
        snprintf(p, sizeof p, "%s/examples/%s/model.json", src_dir(), names[i]);
        assert_int_equal(topo_model_load(p, &m), AI_OK);
        snprintf(p, sizeof p, "%s/examples/%s/training.json", src_dir(), names[i]);
        assert_int_equal(topo_training_load(p, &t), AI_OK);
    }
}

static void test_syntax_error_line_column(void **state)
{
    (void)state;
    /* Missing comma after "count": 2 on line 3. */
    const char *p = write_tmp("bad_syntax.json", "{\n  \"node_groups\": [\n    {\"count\": 2\n     \"name\": \"x\"}]\n}\n");
    topo_cluster *c = NULL;
    assert_int_equal(topo_cluster_load(p, &c), AI_ERR_PARSE);
    assert_null(c);
    char want[600];
    snprintf(want, sizeof want, "%s:4:", p);
    assert_non_null(strstr(ai_last_error(), want));
}

static void test_missing_file(void **state)
{
    (void)state;
    topo_model m;
    assert_int_equal(topo_model_load("/nonexistent/model.json", &m), AI_ERR_IO);
    assert_non_null(strstr(ai_last_error(), "/nonexistent/model.json"));
}

static const char *two_groups_fmt =
    "{\"name\": \"t\", \"node_groups\": ["
    "{\"name\": \"h100\", \"count\": 2, \"device\": \"H100\", \"devices_per_node\": 8,"
    " \"intra\": {\"bw_GBps\": 450}, \"nic\": {\"count\": 8, \"bw_Gbps\": 400}},"
    "{\"name\": \"a100\", \"count\": 4, \"device\": %s, \"devices_per_node\": 8,"
    " \"intra\": {\"bw_GBps\": 300}, \"nic\": {\"count\": 8, \"bw_Gbps\": %s}}]%s}";

static ai_status_t load_variant(const char *device, const char *bw, const char *extra, topo_cluster **c,
                                const char **path)
{
    char text[2048];
    snprintf(text, sizeof text, two_groups_fmt, device, bw, extra);
    *path = write_tmp("variant.json", text);
    return topo_cluster_load(*path, c);
}

static void test_error_names_file_and_path(void **state)
{
    (void)state;
    topo_cluster *c = NULL;
    const char *p;
    assert_int_equal(load_variant("\"A100\"", "-5", "", &c, &p), AI_ERR_INVALID);
    assert_null(c);
    char want[600];
    snprintf(want, sizeof want, "%s: node_groups[1].nic.bw_Gbps:", p);
    assert_non_null(strstr(ai_last_error(), want));

    assert_int_equal(load_variant("\"A100\"", "\"fast\"", "", &c, &p), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "node_groups[1].nic.bw_Gbps: expected a number"));

    assert_int_equal(load_variant("\"Z9000\"", "200", "", &c, &p), AI_ERR_NOTFOUND);
    assert_non_null(strstr(ai_last_error(), "node_groups[1].device: unknown device 'Z9000'"));

    assert_int_equal(load_variant("{\"name\": \"x\", \"memory_GB\": 10}", "200", "", &c, &p), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "node_groups[1].device.peak_tflops"));

    assert_int_equal(load_variant("\"A100\"", "200", ", \"overrides\": [{\"node\": \"a100-9\"}]", &c, &p),
                     AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "overrides[0].node: no node named 'a100-9'"));

    assert_int_equal(load_variant("\"A100\"", "200",
                                  ", \"racks\": [{\"nodes\": [\"h100-0\", \"h100-0\"], \"uplink_Gbps\": 800}]", &c, &p),
                     AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "racks[0].nodes[1]"));
}

static void test_pools_overrides_racks_inline(void **state)
{
    (void)state;
    topo_cluster *c = NULL;
    const char *p;
    /* An inline device named after a catalog entry inherits its figures. */
    assert_int_equal(load_variant("{\"name\": \"A100-SXM4-80GB\", \"memory_GB\": 40}", "200",
                                  ", \"overrides\": [{\"node\": \"a100-3\", \"nic\": {\"bw_Gbps\": 50}},"
                                  " {\"node\": \"a100-2\", \"nic\": {\"bw_Gbps\": 50}}],"
                                  " \"racks\": [{\"name\": \"r0\", \"nodes\": [\"h100-0\", \"h100-1\"], \"uplink_Gbps\": 1600}]",
                                  &c, &p),
                     AI_OK);
    assert_int_equal(c->devices, 48);
    assert_int_equal(c->npools, 3);
    /* h100: 8 x 400 Gb/s = 400 GB/s per node, but the rack uplink of
     * 1600 Gb/s shared by 2 nodes leaves 100 GB/s each. */
    assert_string_equal(c->pools[0].name, "h100");
    assert_true(c->pools[0].node_net_GBps == 100);
    assert_string_equal(c->pools[1].name, "a100");
    assert_int_equal(c->pools[1].nodes, 2);
    assert_true(c->pools[1].device.memory_GB == 40);
    assert_true(c->pools[1].device.peak_tflops[TOPO_BF16] == 312);
    assert_true(c->pools[1].node_net_GBps == 200);
    assert_string_equal(c->pools[2].name, "a100.1");
    assert_int_equal(c->pools[2].nodes, 2);
    assert_true(c->pools[2].node_net_GBps == 50);
    topo_cluster_free(c);
}

/* Misspelled or unknown keys anywhere are refused with the path and the
 * nearest known key (they used to be ignored: "overides" dropped the
 * overrides, "bw_gbps" the slow NIC's rate). */
static void test_unknown_keys(void **state)
{
    (void)state;
    static const struct {
        const char *device, *extra, *path, *says;
    } bad[] = {
        {"\"A100\"", ", \"overides\": [{\"node\": \"a100-3\", \"nic\": {\"bw_Gbps\": 50}}]",
         "overides", "did you mean 'overrides'"},
        {"\"A100\"", ", \"overrides\": [{\"node\": \"a100-3\", \"nic\": {\"bw_gbps\": 50}}]",
         "overrides[0].nic.bw_gbps", "did you mean 'bw_Gbps'"},
        {"\"A100\"", ", \"overrides\": [{\"nod\": \"a100-3\"}]", "overrides[0].nod",
         "did you mean 'node'"},
        {"\"A100\"", ", \"racks\": [{\"nodes\": [\"h100-0\"], \"uplink_gbps\": 800}]",
         "racks[0].uplink_gbps", "did you mean 'uplink_Gbps'"},
        {"{\"name\": \"A100-SXM4-80GB\", \"memory_gb\": 40}", "", "node_groups[1].device.memory_gb",
         "did you mean 'memory_GB'"},
        {"\"A100\"", ", \"colour\": 1", "colour", "known here: name, node_groups, racks, overrides"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        topo_cluster *c = NULL;
        const char *p;
        char want[600];
        assert_int_equal(load_variant(bad[i].device, "200", bad[i].extra, &c, &p), AI_ERR_INVALID);
        assert_null(c);
        snprintf(want, sizeof want, "%s: %s: unknown key", p, bad[i].path);
        if (!strstr(ai_last_error(), want) || !strstr(ai_last_error(), bad[i].says))
            fail_msg("case %zu: '%s'; want '%s' and '%s'", i, ai_last_error(), want, bad[i].says);
    }
    topo_model m;
    const char *p = write_tmp("mk.json", "{\"layers\": 4, \"hiden\": 256, \"heads\": 8, \"vocab\": 1000}");
    assert_int_equal(topo_model_load(p, &m), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "hiden: unknown key; did you mean 'hidden'"));
    topo_training t;
    p = write_tmp("tk.json", "{\"seq_len\": 2048, \"global_batch\": 64, \"optimiser\": \"sgd\"}");
    assert_int_equal(topo_training_load(p, &t), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "optimiser: unknown key; did you mean 'optimizer'"));
}

/* Numbers outside their ranges are refused with the path and the range:
 * a zero NIC count in an override gave a step time of -1 s, node and
 * device counts whose product overflows an int a negative device count. */
static void test_numeric_ranges(void **state)
{
    (void)state;
    topo_cluster *c = NULL;
    const char *p;
    char want[600];
    assert_int_equal(load_variant("\"A100\"", "200",
                                  ", \"overrides\": [{\"node\": \"a100-1\", \"nic\": {\"count\": 0}}]",
                                  &c, &p),
                     AI_ERR_INVALID);
    snprintf(want, sizeof want, "%s: overrides[0].nic.count: 0 is out of range 1..64", p);
    if (!strstr(ai_last_error(), want))
        fail_msg("'%s'; want '%s'", ai_last_error(), want);
    p = write_tmp("big.json",
                  "{\"node_groups\": [{\"name\": \"g\", \"count\": 1000000, \"device\": \"H100\","
                  " \"devices_per_node\": 4096, \"intra\": {\"bw_GBps\": 450},"
                  " \"nic\": {\"bw_Gbps\": 400}}]}");
    assert_int_equal(topo_cluster_load(p, &c), AI_ERR_INVALID);
    snprintf(want, sizeof want, "%s: node_groups[0]: 1000000 nodes x 4096 devices per node: more than", p);
    if (!strstr(ai_last_error(), want))
        fail_msg("'%s'; want '%s'", ai_last_error(), want);
    assert_int_equal(load_variant("\"A100\"", "1e9", "", &c, &p), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "node_groups[1].nic.bw_Gbps: 1e+09 is out of range 0.001..1e+07"));
}

/* A cpu node's speed: default 1, a group's and an override's, the peaks
 * scaled by it (so the pools split), and every bad value named by path. */
static void test_cpu_speed(void **state)
{
    (void)state;
    const char *fmt = "{\"node_groups\": [{\"name\": \"n\", \"count\": 3, \"device\": %s,"
                      " \"devices_per_node\": 1, %s \"nic\": {\"bw_Gbps\": 1}}]%s}";
    char text[1024];
    topo_cluster *c = NULL;
    snprintf(text, sizeof text, fmt, "\"cpu\"", "", "");
    assert_int_equal(topo_cluster_load(write_tmp("s0.json", text), &c), AI_OK);
    assert_true(c->nodes[0].speed == 1 && c->nodes[2].speed == 1);
    assert_int_equal(c->npools, 1);
    double peak = c->nodes[0].device.peak_tflops[TOPO_FP32];
    topo_cluster_free(c);

    snprintf(text, sizeof text, fmt, "\"cpu\"", "\"speed\": 0.5,",
             ", \"overrides\": [{\"node\": \"n-2\", \"speed\": 0.25}]");
    assert_int_equal(topo_cluster_load(write_tmp("s1.json", text), &c), AI_OK);
    assert_true(c->nodes[0].speed == 0.5 && c->nodes[1].speed == 0.5 && c->nodes[2].speed == 0.25);
    assert_true(c->nodes[0].device.peak_tflops[TOPO_FP32] == 0.5 * peak);
    assert_true(c->nodes[2].device.peak_tflops[TOPO_FP32] == 0.25 * peak);
    assert_int_equal(c->npools, 2);
    topo_cluster_free(c);

    static const struct {
        const char *device, *group, *extra, *msg;
    } bad[] = {
        {"\"cpu\"", "\"speed\": 0,", "", "node_groups[0].speed: 0 is out of range (0, 1]"},
        {"\"cpu\"", "\"speed\": 1.5,", "", "node_groups[0].speed: 1.5 is out of range (0, 1]"},
        {"\"cpu\"", "\"speed\": \"half\",", "", "node_groups[0].speed: expected a number"},
        {"\"cpu\"", "", ", \"overrides\": [{\"node\": \"n-1\", \"speed\": -1}]",
         "overrides[0].speed: -1 is out of range (0, 1]"},
        {"\"A100\"", "\"speed\": 0.5,", "", "node_groups[0].speed: speed is for cpu devices"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, fmt, bad[i].device, bad[i].group, bad[i].extra);
        c = NULL;
        assert_int_equal(topo_cluster_load(write_tmp("s2.json", text), &c), AI_ERR_INVALID);
        assert_null(c);
        if (!strstr(ai_last_error(), bad[i].msg))
            fail_msg("case %zu: '%s' does not say '%s'", i, ai_last_error(), bad[i].msg);
        assert_non_null(strstr(ai_last_error(), "s2.json: "));
    }
}

static void test_model_and_training(void **state)
{
    (void)state;
    topo_model m;
    const char *p = write_tmp("m.json", "{\"layers\": 4, \"hidden\": 256, \"heads\": 8, \"vocab\": 1000}");
    assert_int_equal(topo_model_load(p, &m), AI_OK);
    assert_int_equal(m.kv_heads, 8);
    assert_int_equal(m.ffn_hidden, 1024);
    assert_int_equal(m.ffn_kind, TOPO_FFN_GELU);
    /* GPT layer: 12 h^2 weights + 13 h biases/norms. */
    assert_true(topo_model_layer_params(&m) == 12.0 * 256 * 256 + 13 * 256);

    p = write_tmp("m2.json", "{\"layers\": 4, \"hidden\": 250, \"heads\": 8, \"vocab\": 1000}");
    assert_int_equal(topo_model_load(p, &m), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), ": hidden: 250 is not a multiple of heads"));
    p = write_tmp("m3.json", "{\"layers\": 4, \"hidden\": 256, \"heads\": 8, \"kv_heads\": 3, \"vocab\": 1000}");
    assert_int_equal(topo_model_load(p, &m), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "kv_heads"));
    p = write_tmp("m4.json", "{\"layers\": 4, \"hidden\": 256, \"heads\": 8, \"vocab\": 1000, \"ffn_kind\": \"relu\"}");
    assert_int_equal(topo_model_load(p, &m), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "ffn_kind"));

    topo_training t;
    p = write_tmp("t.json", "{\"seq_len\": 2048, \"global_batch\": 64}");
    assert_int_equal(topo_training_load(p, &t), AI_OK);
    assert_int_equal(t.precision, TOPO_BF16);
    assert_int_equal(t.optimizer, TOPO_OPT_ADAM);
    assert_int_equal(t.flash_attention, 1);
    assert_int_equal(t.grad_fp32, 1);
    p = write_tmp("t2.json", "{\"seq_len\": 2048, \"global_batch\": 64, \"precision\": \"int3\"}");
    assert_int_equal(topo_training_load(p, &t), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "t2.json: precision: 'int3'"));
    p = write_tmp("t3.json", "{\"seq_len\": 2048}");
    assert_int_equal(topo_training_load(p, &t), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "global_batch: required"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_catalog),
        cmocka_unit_test(test_example_specs_load),
        cmocka_unit_test(test_syntax_error_line_column),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_error_names_file_and_path),
        cmocka_unit_test(test_pools_overrides_racks_inline),
        cmocka_unit_test(test_cpu_speed),
        cmocka_unit_test(test_model_and_training),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_numeric_ranges),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
