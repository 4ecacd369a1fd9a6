// memfine: the command line (core/cli/commands.cpp declares its commands).
#include "core/cli/commands.h"

int main(int argc, char** argv) { return memfine::cli::run_command_line(argc, argv); }
