// memfine's commands, each declared once (core/cli/command.h), and the command line that runs them.
#pragma once
#include <vector>

#include "core/cli/command.h"

namespace memfine::cli {

const std::vector<Command>& commands();

// `memfine ARGS...`: the overview, --version, a command's --help, or the command; its exit status.
int run_command_line(int argc, char** argv);

// `memfine strategies` in its three forms: "text", "markdown", "json".
int strategies_command(const std::string& as);

}  // namespace memfine::cli
