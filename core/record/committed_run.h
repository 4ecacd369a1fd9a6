// How this run's speed compares with the committed run of the same experiment, configuration and
// machine class (results/<device class>/<experiment>/results.jsonl in the source tree): a newcomer's
// quickstart on a busy machine would otherwise read the machine's slowness as the code's.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace memfine {

// A note when the median over matching records of (this run's median step / the committed one's)
// lies outside [1/1.3, 1.3]; empty when it does not, when nothing matches, or when `written` (this
// run's results file) is the committed file itself.
std::string committed_speed_note(const std::vector<nlohmann::json>& fresh, const std::string& written);

}  // namespace memfine
