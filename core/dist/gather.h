// Real ranks' records reach one results file: rank 0 gathers every rank's records of a point
// through the process group's store, and the summary names the rank that limits the job.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace memfine {

class Dist;

// Every rank calls it with its own records of the point; rank 0 gets all ranks' (in rank order),
// the others an empty list.
std::vector<nlohmann::json> gather_records(const Dist& dist, const std::string& point,
                                           const std::vector<nlohmann::json>& mine);

// "hottest rank for POINT STRATEGY: rank R (PEAK)" lines: the largest activation peak of each.
std::string hottest_ranks(const std::vector<nlohmann::json>& records);

}  // namespace memfine
