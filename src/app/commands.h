/* commands.h: the subcommands main.c dispatches to, each parsing its own flags (exit 2 on a bad one). */
#pragma once

int cmd_bench(int argc, char **argv);
