/* The `autoinfra` command: one file per subcommand, each uses only
 * the public header (plus this one). Each returns a process exit status:
 * 0 success, 1 runtime failure, 2 usage error. */
#ifndef AI_CLI_H
#define AI_CLI_H

int cli_launch_main(int argc, char **argv);
int cli_bench_main(int argc, char **argv);
int cli_bench_ft_main(int argc, char **argv); /* `bench ft` (cmd_bench_ft.c) */
int cli_plan_main(int argc, char **argv);
int cli_cluster_main(int argc, char **argv);
int cli_kb_main(int argc, char **argv);
int cli_profile_main(int argc, char **argv);
int cli_plan_train_main(int argc, char **argv);
int cli_sim_main(int argc, char **argv);
int cli_env_main(int argc, char **argv);

/* Shared argument parsing (cli_args.c); each returns 0 or -1. */
#include <stddef.h>
int cli_parse_long(const char *text, long min, long max, long *out);
int cli_parse_int(const char *text, long min, long max, int *out);
/* A size (ai_parse_size's grammar, autoinfra.h) in [text, stop) (stop
 * NULL: the whole string). */
int cli_parse_size(const char *text, const char *stop, size_t *out);
/* argv[*i] is option `name`, as "name VALUE" or "name=VALUE": 1 with
 * *value set (and *i advanced past a separate value); 0 if not; -1 if the
 * value is missing. */
int cli_match_opt(int argc, char **argv, int *i, const char *name, const char **value);
/* The knowledge base path: `given` (--kb), else the default; 1 with a
 * message naming `cmd` when neither works. */
int cli_kb_path(const char *given, const char *cmd, char *buf, size_t len);
/* Print root as indented JSON and release it (NULL: nothing printed); 1 if
 * it could not be printed. */
typedef struct json_t json_t;
int cli_print_json(json_t *root);

/* Slurm's description of a cluster (cmd_slurm.c). */
#include "autoinfra.h"
#define CLI_SLURM_MAX_DEVICES 64
typedef struct cli_slurm {
    ai_slurm_source src;
    const char *devices[CLI_SLURM_MAX_DEVICES];
    const char *conf_path, *topo_path;
    char *conf_text, *topo_text;
    const char *overlay_path;  /* --overlay: the same settings in JSON */
    json_t *overlay, *overlay_devices;
    const char *all_devices[2 * CLI_SLURM_MAX_DEVICES];
    char devices_label[4200];
} cli_slurm;
/* argv[*i] one of the options cli_slurm_usage() lists: 1 (consumed, *i
 * past its value), 0 (not one), -1 (bad value, said naming cmd). */
int cli_slurm_opt(cli_slurm *s, int argc, char **argv, int *i, const char *cmd);
/* Read --slurm-conf and --topology; without --slurm-conf and with
 * ask_scontrol, ask `scontrol show node/partition/topology`. 1 on failure. */
int cli_slurm_read(cli_slurm *s, const char *cmd, int ask_scontrol);
void cli_slurm_free(cli_slurm *s);
/* `plan --from-slurm PARTITION` / `--from-slurm-job` (cmd_slurm.c): the
 * cluster from Slurm, written to a file the planner loads, and the srun
 * line for the plan it chooses. */
typedef struct cli_slurm_plan {
    cli_slurm s;
    int on, slurm_opts, temp;
    const char *program, *cluster_out;
    char path[4096];
} cli_slurm_plan;
int cli_slurm_plan_opt(cli_slurm_plan *sp, int argc, char **argv, int *i);
/* Sets *cpath to the cluster made from Slurm; 0, or the exit status. */
int cli_slurm_plan_cluster(cli_slurm_plan *sp, const char **cpath);
/* Adds the srun line to the report's text (or "srun" to its JSON). */
int cli_slurm_plan_print(cli_slurm_plan *sp, const ai_cluster *cl, const ai_plan_report *report,
                         int as_json, char **text);
void cli_slurm_plan_free(cli_slurm_plan *sp);
const char *cli_slurm_usage(void);
/* The srun line that runs `program` on the devices the plan uses. */
int cli_slurm_srun_line(const ai_cluster *cl, const ai_plan_summary *sum, const char *partition,
                        const char *program, char *out, size_t cap);

#endif
