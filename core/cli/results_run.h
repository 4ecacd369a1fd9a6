// One run's records from a results folder (DIR/results.jsonl, or the file), with today's labels and
// their typed views: what `memfine compare` and `memfine answer` read.
#pragma once
#include <string>
#include <vector>

#include "core/record/schema.h"

namespace memfine::cli {

struct Run {
  std::string path;  // the file read
  std::vector<json> records;
  std::vector<RecordView> views;  // point into `records`: move a Run whole, never its records alone
};

// std::runtime_error where the file cannot be read, a record is not one, or the folder holds the
// records of several runs (another experiment or seed): `command` takes one run a folder.
Run read_run(const std::string& dir_or_file, const std::string& command);

}  // namespace memfine::cli
