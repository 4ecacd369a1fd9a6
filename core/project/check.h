// What a project file must satisfy beyond its keys' types and ranges (core/project/config.h),
// checked where the strategies' registry and the reliability presets are known: every strategy
// resolved against its declaration (all registered ones at their defaults where the file names
// none), a known reliability preset, hardware with the rates a step time needs. A validation
// file's published figures are read apart (published.h).
#pragma once
#include <string>

#include "core/project/config.h"
#include "core/project/layout.h"

namespace memfine {

// read_project, then these checks; std::invalid_argument with every problem, one per line, as
// "FILE:LINE: key: what is wrong".
ProjectConfig load_project(const std::string& file, const std::string& presets_dir);

// What the file says of the cluster and the run, for every layout.
ProjectSetting project_setting(const ProjectConfig& c);

}  // namespace memfine
