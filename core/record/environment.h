// Where and with what a record was measured.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "core/config/config.h"

namespace memfine {

// Git commit, LibTorch version, device, threads, BLAS, host, date.
nlohmann::json environment(const ExperimentConfig& c);

// This machine's CPU model ("AMD EPYC 7B13"), as /proc/cpuinfo names it.
std::string cpu_name();

// The commit the code was built and run from (12 hex digits), "-dirty" when code or experiments
// differ from it (changes under results/ and paper_figures/ do not count).
std::string git_commit();

// `memfine --version`: git_commit() (the build's commit outside the checkout) and LibTorch's.
std::string version_text();

// The source tree this binary was built from (its scripts: memfine plot).
std::string source_dir();

// "cpu", or the GPU's class ("h100", "h200", ...): results/<device class>/<experiment>/.
std::string device_class(const std::string& device);

}  // namespace memfine
