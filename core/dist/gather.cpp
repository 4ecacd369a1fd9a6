#include "core/dist/gather.h"

#include <map>
#include <sstream>

#include "core/dist/dist.h"
#include "core/util/format.h"

namespace memfine {

std::vector<nlohmann::json> gather_records(const Dist& dist, const std::string& point,
                                           const std::vector<nlohmann::json>& mine) {
  dist.store_set("records/" + point + "/" + std::to_string(dist.rank()), nlohmann::json(mine).dump());
  std::vector<nlohmann::json> all;
  if (dist.rank() != 0) return all;
  for (int r = 0; r < dist.world(); ++r)
    for (auto& rec : nlohmann::json::parse(dist.store_get("records/" + point + "/" + std::to_string(r))))
      all.push_back(rec);
  return all;
}

std::string hottest_ranks(const std::vector<nlohmann::json>& records) {
  std::map<std::string, std::pair<int64_t, int64_t>> hottest;
  for (const auto& r : records)
    if (r["status"] == "ok") {
      auto& h = hottest[r["point"].get<std::string>() + " " + r["strategy"].get<std::string>()];
      const int64_t peak = r["peak_activation_bytes"].get<int64_t>();
      if (peak > h.second) h = {r["rank"].get<int64_t>(), peak};
    }
  std::ostringstream out;
  for (const auto& [what, h] : hottest)
    out << "hottest rank for " << what << ": rank " << h.first << " (" << fmt_bytes(double(h.second)) << ")\n";
  return out.str();
}

}  // namespace memfine
