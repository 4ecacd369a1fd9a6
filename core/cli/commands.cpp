#include "core/cli/commands.h"

#include <algorithm>
#include <iostream>

#include <c10/util/Exception.h>

#include "core/dist/process.h"
#include "core/meter/memory_meter.h"
#include "core/record/environment.h"
#include "core/util/say.h"

namespace memfine::cli {

namespace {

std::string overview() {
  std::string out =
      "memfine - memory-aware MoE training benchmarks (MemFine, arXiv 2511.21431)\n\n"
      "usage: memfine <command> [options]\n       memfine --version\n\ncommands:\n";
  for (const auto& c : commands()) {
    const std::string head = c.name + (c.operands.empty() ? "" : " " + c.operands);
    out += "  " + head + (head.size() < 22 ? std::string(24 - head.size(), ' ') : "\n" + std::string(26, ' ')) +
           c.summary + "\n";
  }
  return out + "\nRun 'memfine <command> --help' for a command's options. Experiment keys: experiments/README.md.\n";
}

}  // namespace

const std::vector<Command>& commands() {
  static const std::vector<Command> all = {
      run_command(),        train_command(),      launch_command(), validate_command(), predict_command(),
      project_command(),    checkpoint_command(), table_command(),  compare_command(),  answer_command(), plot_command(),
      strategies_command(), keys_command(),       schema_command(), export_command()};
  return all;
}

int run_command_line(int argc, char** argv) {
  use_passive_openmp_waits(argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << overview();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version" || args[0] == "version") {
    std::cout << version_text() << "\n";
    return 0;
  }
  const auto& all = commands();
  const auto it = std::find_if(all.begin(), all.end(), [&](const Command& c) { return c.name == args[0]; });
  if (it == all.end()) {
    std::cerr << "memfine: unknown command '" << args[0] << "'\n\n" << overview();
    return 2;
  }
  const Command& cmd = *it;
  args.erase(args.begin());
  if (std::find(args.begin(), args.end(), "--help") != args.end() ||
      std::find(args.begin(), args.end(), "-h") != args.end()) {
    std::cout << help(cmd);
    return 0;
  }
  // Count every CPU byte from the start: installed before any tensor exists.
  MemoryMeter::get("cpu");
  try {
    return cmd.run(parse(cmd, args));
  } catch (const UsageError& e) {
    std::cerr << "memfine: " << e.what() << "\n\n" << help(cmd);
    return 2;
  } catch (const c10::Error& e) {  // LibTorch's own, without its stack of frames
    say("memfine " + cmd.name + ": " + e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    say("memfine " + cmd.name + ": " + e.what());
    return 1;
  }
}

}  // namespace memfine::cli
