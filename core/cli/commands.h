// memfine's commands, each declared once in a file of its own (core/cli/<command>.cpp: its
// operands, flags, help and body; core/cli/command.h), gathered into one table here, and the
// command line that runs them.
#pragma once
#include <vector>

#include "core/cli/command.h"

namespace memfine::cli {

// The table of commands, in the overview's order.
const std::vector<Command>& commands();

// `memfine ARGS...`: the overview, --version, a command's --help, or the command; its exit status.
int run_command_line(int argc, char** argv);

// Each command's declaration, from its file.
Command run_command();
Command train_command();
Command launch_command();
Command validate_command();
Command predict_command();
Command project_command();
Command checkpoint_command();
Command table_command();
Command compare_command();
Command answer_command();
Command plot_command();
Command strategies_command();
Command keys_command();
Command schema_command();
Command export_command();

}  // namespace memfine::cli
