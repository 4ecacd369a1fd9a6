// What the commands that run an experiment share: `run`'s and `train`'s flags (which `launch`
// passes on to its ranks), the options they make, loading a file with its problems said, and the
// stamp (commit and date) a projection or formula's JSON carries.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/cli/command.h"
#include "core/config/config.h"
#include "core/run/job.h"

namespace memfine::cli {

extern const Flag kOut, kResume, kThreads, kNoProgress, kTraceOut, kProfile, kMemoryHistory;

RunOptions run_options(const Args& a);

// Prints the problems of an experiment file; its points when there are none.
std::vector<SweepPoint> load_or_say(const std::string& yaml, bool& ok);

// What a projection or a formula's JSON names: the commit and the date it was made at.
std::map<std::string, std::string> made_stamp();

}  // namespace memfine::cli
