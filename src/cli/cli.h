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

#endif
