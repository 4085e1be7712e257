/* commands.h — the subcommands of the megafold command, one file each in src/cli. */
#ifndef MF_CLI_COMMANDS_H
#define MF_CLI_COMMANDS_H

int mf_cmd_info(int argc, char **argv);
int mf_cmd_demo(int argc, char **argv);
int mf_cmd_prep(int argc, char **argv);

#endif
