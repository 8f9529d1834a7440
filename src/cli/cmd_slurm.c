/*
 * Slurm for the CLI: the options that say where Slurm's description comes
 * from and what it lacks (shared by `cluster from-slurm` and
 * `plan --from-slurm`), reading the files or asking scontrol, and the srun
 * line for a plan.
 */
#include "autoinfra.h"
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *read_all(FILE *f)
{
    size_t n = 0, cap = 4096;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    for (;;) {
        if (n + 1 >= cap) {
            char *t = realloc(s, cap * 2);
            if (!t) {
                free(s);
                return NULL;
            }
            s = t;
            cap *= 2;
        }
        size_t r = fread(s + n, 1, cap - 1 - n, f);
        n += r;
        if (r == 0)
            break;
    }
    s[n] = '\0';
    return s;
}

static char *read_file(const char *cmd, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s: %s: %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    char *s = read_all(f);
    fclose(f);
    if (!s)
        fprintf(stderr, "%s: %s: out of memory\n", cmd, path);
    return s;
}

/* `scontrol ARGS` (30 s at most); NULL when it fails. */
static char *scontrol(const char *cmd, const char *args, int quiet)
{
    char line[256];
    snprintf(line, sizeof line, "timeout 30 scontrol %s 2>&1", args);
    FILE *p = popen(line, "r");
    if (!p) {
        fprintf(stderr, "%s: cannot run scontrol: %s\n", cmd, strerror(errno));
        return NULL;
    }
    char *s = read_all(p);
    int rc = pclose(p);
    if (s && rc == 0)
        return s;
    if (!quiet)
        fprintf(stderr, "%s: `scontrol %s` failed (status %d): %s\n", cmd, args, rc,
                s && *s ? s : "no output (is Slurm's scontrol installed and slurmctld up?)\n");
    free(s);
    return NULL;
}

int cli_slurm_opt(cli_slurm *s, int argc, char **argv, int *i, const char *cmd)
{
    const char *a = argv[*i];
    static const char *const with_value[] = {"--slurm-conf", "--topology", "--device", "--nic-gbps",
                                             "--nics", "--intra-GBps", "--uplink-gbps", "--name",
                                             "--partition", "--nodelist", "--overlay"};
    int known = !strcmp(a, "--linkspeed-mbps");
    for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
        known |= !strcmp(a, with_value[k]);
    if (!known)
        return 0;
    if (!strcmp(a, "--linkspeed-mbps")) {
        s->src.linkspeed_mbps = 1;
        return 1;
    }
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value\n", cmd, a);
        return -1;
    }
    const char *v = argv[++*i];
    double d;
    if (!strcmp(a, "--slurm-conf"))
        s->conf_path = v;
    else if (!strcmp(a, "--overlay"))
        s->overlay_path = v;
    else if (!strcmp(a, "--topology"))
        s->topo_path = v;
    else if (!strcmp(a, "--name"))
        s->src.name = v;
    else if (!strcmp(a, "--partition"))
        s->src.partition = v;
    else if (!strcmp(a, "--nodelist"))
        s->src.nodelist = v;
    else if (!strcmp(a, "--device")) {
        if (s->src.ndevices >= CLI_SLURM_MAX_DEVICES) {
            fprintf(stderr, "%s: more than %d --device options\n", cmd, CLI_SLURM_MAX_DEVICES);
            return -1;
        }
        s->devices[s->src.ndevices++] = v;
        s->src.devices = s->devices;
    } else if (!strcmp(a, "--nics")) {
        if (cli_parse_int(v, 1, 64, &s->src.nics)) {
            fprintf(stderr, "%s: --nics '%s' is not in 1..64\n", cmd, v);
            return -1;
        }
    } else {
        char *end;
        d = strtod(v, &end);
        if (*end || end == v || !(d > 0) || d > 1e9) {
            fprintf(stderr, "%s: %s '%s' is not a rate above 0\n", cmd, a, v);
            return -1;
        }
        if (!strcmp(a, "--nic-gbps"))
            s->src.nic_Gbps = d;
        else if (!strcmp(a, "--intra-GBps"))
            s->src.intra_GBps = d;
        else
            s->src.uplink_Gbps = d;
    }
    return 1;
}

/* --overlay F: {"devices": {"PATTERN": "KIND[:N]", ...}, "nic_Gbps": G, "nics": N,
 * "intra_GBps": B, "uplink_Gbps": G, "linkspeed_mbps": true, "name": "..."}; the
 * command line's values win, its --device options come after the file's. */
static int overlay_read(cli_slurm *s, const char *cmd)
{
    const char *f = s->overlay_path;
    json_error_t je;
    json_t *doc = json_load_file(f, JSON_REJECT_DUPLICATES, &je);
    if (!doc) {
        fprintf(stderr, "%s: %s:%d:%d: %s\n", cmd, f, je.line, je.column, je.text);
        return 1;
    }
    s->overlay = doc;
    if (!(s->overlay_devices = json_array()))
        return 1;
    if (!json_is_object(doc)) {
        fprintf(stderr, "%s: %s: an overlay is a JSON object\n", cmd, f);
        return 1;
    }
    static const char *const known = "devices, nic_Gbps, nics, intra_GBps, uplink_Gbps, "
                                     "linkspeed_mbps, name";
    const char *key;
    json_t *v;
    int n = 0;
    json_object_foreach(doc, key, v) {
        double *rate = !strcmp(key, "nic_Gbps")      ? &s->src.nic_Gbps
                       : !strcmp(key, "intra_GBps")  ? &s->src.intra_GBps
                       : !strcmp(key, "uplink_Gbps") ? &s->src.uplink_Gbps
                                                     : NULL;
        if (rate) {
            if (!json_is_number(v) || !(json_number_value(v) > 0) || json_number_value(v) > 1e9) {
                fprintf(stderr, "%s: %s: %s: expected a rate above 0\n", cmd, f, key);
                return 1;
            }
            if (*rate == 0)
                *rate = json_number_value(v);
        } else if (!strcmp(key, "nics")) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 64) {
                fprintf(stderr, "%s: %s: nics: expected an integer 1..64\n", cmd, f);
                return 1;
            }
            if (s->src.nics == 0)
                s->src.nics = (int)json_integer_value(v);
        } else if (!strcmp(key, "linkspeed_mbps")) {
            if (!json_is_boolean(v)) {
                fprintf(stderr, "%s: %s: linkspeed_mbps: expected true or false\n", cmd, f);
                return 1;
            }
            s->src.linkspeed_mbps |= json_is_true(v);
        } else if (!strcmp(key, "name")) {
            if (!json_is_string(v)) {
                fprintf(stderr, "%s: %s: name: expected a string\n", cmd, f);
                return 1;
            }
            if (!s->src.name)
                s->src.name = json_string_value(v);
        } else if (!strcmp(key, "devices")) {
            const char *pat;
            json_t *kind;
            if (!json_is_object(v)) {
                fprintf(stderr, "%s: %s: devices: expected an object {\"PATTERN\": \"KIND[:N]\"}\n", cmd, f);
                return 1;
            }
            json_object_foreach(v, pat, kind) {
                if (!json_is_string(kind)) {
                    fprintf(stderr, "%s: %s: devices.%s: expected a string \"KIND[:N]\"\n", cmd, f, pat);
                    return 1;
                }
                if (n >= CLI_SLURM_MAX_DEVICES) {
                    fprintf(stderr, "%s: %s: devices: more than %d patterns\n", cmd, f,
                            CLI_SLURM_MAX_DEVICES);
                    return 1;
                }
                /* "PATTERN=KIND[:N]" as --device takes it, kept in the document */
                char buf[512];
                snprintf(buf, sizeof buf, "%s=%s", pat, json_string_value(kind));
                json_t *str = json_string(buf);
                if (!str || json_array_append_new(s->overlay_devices, str))
                    return 1;
                n++;
            }
        } else {
            fprintf(stderr, "%s: %s: %s: unknown key (known: %s)\n", cmd, f, key, known);
            return 1;
        }
    }
    int k = 0;
    for (size_t i = 0; i < json_array_size(s->overlay_devices); i++)
        s->all_devices[k++] = json_string_value(json_array_get(s->overlay_devices, i));
    for (int i = 0; i < s->src.ndevices; i++)
        s->all_devices[k++] = s->devices[i];
    s->src.devices = s->all_devices;
    s->src.ndevices_file = (int)json_array_size(s->overlay_devices);
    s->src.ndevices = k;
    snprintf(s->devices_label, sizeof s->devices_label, "%s: devices", f);
    s->src.devices_file = s->devices_label;
    return 0;
}

int cli_slurm_read(cli_slurm *s, const char *cmd, int ask_scontrol)
{
    if (s->overlay_path && overlay_read(s, cmd))
        return 1;
    if (s->conf_path) {
        if (!(s->conf_text = read_file(cmd, s->conf_path)))
            return 1;
        s->src.nodes_text = s->conf_text;
        s->src.nodes_label = s->conf_path;
    } else if (ask_scontrol) {
        char *nodes = scontrol(cmd, "show node -o", 0);
        char *parts = nodes ? scontrol(cmd, "show partition -o", 0) : NULL;
        if (!parts) {
            free(nodes);
            return 1;
        }
        size_t n = strlen(nodes), m = strlen(parts);
        s->conf_text = malloc(n + m + 2);
        if (!s->conf_text) {
            free(nodes);
            free(parts);
            return 1;
        }
        memcpy(s->conf_text, nodes, n);
        s->conf_text[n] = '\n';
        memcpy(s->conf_text + n + 1, parts, m + 1);
        free(nodes);
        free(parts);
        s->src.nodes_text = s->conf_text;
        s->src.nodes_label = "scontrol show node/partition -o";
    }
    if (s->topo_path) {
        if (!(s->topo_text = read_file(cmd, s->topo_path)))
            return 1;
        s->src.topology_text = s->topo_text;
        s->src.topology_label = s->topo_path;
    } else if (ask_scontrol && !s->conf_path) {
        /* without topology/tree scontrol has no switches: no racks */
        s->topo_text = scontrol(cmd, "show topology", 1);
        if (s->topo_text && strstr(s->topo_text, "SwitchName=")) {
            s->src.topology_text = s->topo_text;
            s->src.topology_label = "scontrol show topology";
        }
    }
    return 0;
}

void cli_slurm_free(cli_slurm *s)
{
    free(s->conf_text);
    free(s->topo_text);
    s->conf_text = s->topo_text = NULL;
    json_decref(s->overlay_devices);
    json_decref(s->overlay);
    s->overlay = s->overlay_devices = NULL;
}

const char *cli_slurm_usage(void)
{
    return "  --slurm-conf F     slurm.conf: NodeName= (CPUs, Gres=gpu[:TYPE]:N) and PartitionName= lines\n"
           "  --topology F       topology.conf (topology/tree): each switch with Nodes= is a rack\n"
           "  --device PAT=KIND[:N]  the device of the nodes PAT names (a hostlist such as\n"
           "                     'gpu[001-016]', or a glob 'gpu*'), N per node; later ones win.\n"
           "                     Default: the Gres GPU type and count; 'cpu' counts CPUs\n"
           "  --nic-gbps G       per NIC (required: Slurm does not know it); --nics N (1)\n"
           "  --intra-GBps B     between a node's devices, per device and direction\n"
           "  --uplink-gbps G    every rack's uplink; else with --linkspeed-mbps a switch's\n"
           "                     LinkSpeed= in Mbit/s; else non-blocking (the sum of its NICs)\n"
           "  --partition P      only P's nodes; --nodelist L only those of the hostlist L\n"
           "  --name NAME        the cluster's name (slurm)\n"
           "  --overlay F        the same in JSON: {\"devices\": {\"PATTERN\": \"KIND[:N]\"},\n"
           "                     \"nic_Gbps\", \"nics\", \"intra_GBps\", \"uplink_Gbps\",\n"
           "                     \"linkspeed_mbps\": true, \"name\"}; the command line wins\n";
}

int cli_slurm_srun_line(const ai_cluster *cl, const ai_plan_summary *sum, const char *partition,
                        const char *program, char *out, size_t cap)
{
    /* one node group: any N of its nodes serve; else the plan may want
     * particular nodes, and the line asks for every node */
    int nn = ai_cluster_node_count(cl), dpn = 0, uniform = 1;
    char group[64] = "";
    for (int i = 0; i < nn; i++) {
        ai_node_info n;
        if (ai_cluster_node(cl, i, &n) != AI_OK)
            return 1;
        if (i && (n.devices != dpn || strcmp(n.group, group)))
            uniform = 0;
        dpn = n.devices;
        snprintf(group, sizeof group, "%s", n.group);
    }
    long used = (long)sum->tp * sum->pp * sum->dp * sum->cp;
    char part[128] = "";
    if (partition)
        snprintf(part, sizeof part, " -p %s", partition);
    if (uniform && dpn > 0 && used % dpn == 0 && used / dpn <= nn)
        snprintf(out, cap, "srun%s -N %ld --ntasks-per-node %d --autoinfra %s", part, used / dpn, dpn,
                 program);
    else
        snprintf(out, cap, "srun%s -N %d -n %ld --autoinfra %s", part, nn, used, program);
    return 0;
}

/* ------------------------------------------------ plan --from-slurm */

int cli_slurm_plan_opt(cli_slurm_plan *sp, int argc, char **argv, int *i)
{
    const char *cmd = "autoinfra plan";
    const char *a = argv[*i];
    if (!strcmp(a, "--from-slurm-job")) {
        const char *nl = getenv("SLURM_JOB_NODELIST");
        if (!nl || !*nl) {
            fprintf(stderr, "%s: --from-slurm-job: SLURM_JOB_NODELIST is not set (run it inside an "
                            "allocation: salloc, sbatch)\n", cmd);
            return -1;
        }
        sp->s.src.nodelist = nl;
        sp->on = 1;
        return 1;
    }
    if (!strcmp(a, "--from-slurm") || !strcmp(a, "--program") || !strcmp(a, "--cluster-out")) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value\n", cmd, a);
            return -1;
        }
        const char *v = argv[++*i];
        if (!strcmp(a, "--from-slurm")) {
            sp->s.src.partition = v;
            sp->on = 1;
        } else if (!strcmp(a, "--program")) {
            sp->program = v;
        } else {
            sp->cluster_out = v;
        }
        return 1;
    }
    int r = cli_slurm_opt(&sp->s, argc, argv, i, cmd);
    if (r == 1)
        sp->slurm_opts = 1;
    return r;
}

int cli_slurm_plan_cluster(cli_slurm_plan *sp, const char **cpath)
{
    const char *cmd = "autoinfra plan";
    if (!sp->on) {
        if (sp->slurm_opts || sp->program || sp->cluster_out) {
            fprintf(stderr, "%s: Slurm options need --from-slurm PARTITION or --from-slurm-job\n", cmd);
            return 2;
        }
        return 0;
    }
    if (*cpath) {
        fprintf(stderr, "%s: --cluster and --from-slurm exclude each other\n", cmd);
        return 2;
    }
    if (cli_slurm_read(&sp->s, cmd, 1))
        return 1;
    char *json = NULL;
    if (ai_slurm_cluster_json(&sp->s.src, &json) != AI_OK) {
        fprintf(stderr, "%s: --from-slurm: %s\n", cmd, ai_last_error());
        return 1;
    }
    FILE *f = NULL;
    if (sp->cluster_out) {
        snprintf(sp->path, sizeof sp->path, "%s", sp->cluster_out);
        f = fopen(sp->path, "w");
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(sp->path, sizeof sp->path, "%s/autoinfra-slurm-cluster-XXXXXX.json",
                 tmp && *tmp ? tmp : "/tmp");
        int fd = mkstemps(sp->path, 5);
        if (fd >= 0) {
            sp->temp = 1;
            f = fdopen(fd, "w");
            if (!f)
                close(fd);
        }
    }
    int bad = !f || fprintf(f, "%s\n", json) < 0;
    if (f && fclose(f) != 0)
        bad = 1;
    free(json);
    if (bad) {
        fprintf(stderr, "%s: cannot write the cluster spec %s: %s\n", cmd, sp->path, strerror(errno));
        cli_slurm_plan_free(sp);
        return 1;
    }
    *cpath = sp->path;
    return 0;
}

int cli_slurm_plan_print(cli_slurm_plan *sp, const ai_cluster *cl, const ai_plan_report *report,
                         int as_json, char **text)
{
    if (!sp->on)
        return 0;
    ai_plan_summary sum;
    char line[512];
    if (ai_plan_report_summary(report, 0, &sum) != AI_OK ||
        cli_slurm_srun_line(cl, &sum, sp->s.src.partition, sp->program ? sp->program : "PROGRAM",
                            line, sizeof line))
        return 1;
    if (!as_json) {
        size_t n = strlen(*text);
        char *t = realloc(*text, n + strlen(line) + 64);
        if (!t)
            return 1;
        snprintf(t + n, strlen(line) + 64, "\nrun it: %s\n", line);
        *text = t;
        return 0;
    }
    json_error_t je;
    json_t *doc = json_loads(*text, 0, &je);
    if (!doc)
        return 1;
    json_object_set_new(doc, "srun", json_string(line));
    char *t = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
    json_decref(doc);
    if (!t)
        return 1;
    free(*text);
    *text = t;
    return 0;
}

void cli_slurm_plan_free(cli_slurm_plan *sp)
{
    if (sp->temp)
        unlink(sp->path);
    sp->temp = 0;
    cli_slurm_free(&sp->s);
}
