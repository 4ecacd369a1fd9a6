// What --resume may continue: a results file of this experiment only. Every record must be of one
// of the file's points, measured with that point's configuration (its strategies aside: adding a
// strategy and resuming measures only it), so that a folder never mixes two configurations' numbers.
// Training records must hold each run's steps once, from 0 and in order: they are the truth a
// resumed run continues from (core/train/).
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/config/config.h"

namespace memfine {

using json = nlohmann::json;

// The record's strategy as this build labels it, from its name and parameters: records whose
// labels were written before labels were canonical (`memfine(bins=[1, 2, 4, 8],chunks=auto)`)
// resolve to today's (`memfine(chunks=auto)`). A strategy this build does not know keeps its label.
std::string canonical_label(const json& record);

// "PATH:LINE: what is wrong" for each record that does not belong (record i is on line i + 1).
std::vector<std::string> resume_problems(const std::string& path, const std::vector<json>& records,
                                         const std::vector<SweepPoint>& points, bool training);

// The keys where two configurations differ, as "key: A there, B here" (strategies aside; the
// words name the two).
std::vector<std::string> config_differences(const json& there, const json& here, const std::string& a = "there",
                                            const std::string& b = "here");

}  // namespace memfine
