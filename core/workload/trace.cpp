#include "core/workload/trace.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/util/format.h"

namespace memfine {

namespace {
// A whole integer field ("1.9", "1e3" and "8\\0junk" are not): the trace counts rows exactly.
bool parse_int(const std::string& text, int64_t& out) {
  const char* s = text.c_str();
  const char* stop = s + text.size();
  while (*s == ' ') ++s;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s, &end, 10);
  if (end == s || errno == ERANGE) return false;
  while (*end == ' ' || *end == '\r') ++end;
  if (end != stop) return false;  // strtoll stops at a NUL byte: the field must end there too
  out = v;
  return true;
}
}  // namespace

namespace {

ParsedTrace parse_csv_trace(const std::string& path) {
  ParsedTrace t;
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read trace file '" + path + "': " + std::strerror(errno));
  std::string line;
  int lineno = 0, columns = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
    if (columns == 0) columns = int(cells.size());
    if (lineno == 1 && line.find("layer") != std::string::npos) continue;  // header
    if (int(cells.size()) != columns || (columns != 3 && columns != 4))
      throw std::invalid_argument(path + ":" + std::to_string(lineno) +
                                  ": expected 'layer,expert,tokens' or 'step,layer,expert,tokens' on every line");
    int64_t v[4] = {0, 0, 0, 0};
    for (int k = 0; k < columns; ++k)
      if (!parse_int(cells[size_t(k)], v[4 - columns + k]))
        throw std::invalid_argument(path + ":" + std::to_string(lineno) + ": not integers: '" + printable(line) + "'");
    const int64_t step = v[0], layer = v[1], e = v[2], n = v[3];
    const std::string at = path + ":" + std::to_string(lineno) + ": ";
    if (n > (int64_t(1) << 40)) throw std::invalid_argument(at + "tokens " + std::to_string(n) + " is absurd");
    if (e < 0 || n < 0 || step < 0 || layer < 0)
      throw std::invalid_argument(at + "step, layer, expert and tokens must be >= 0");
    if (e > t.max_expert) t.max_expert = e, t.max_expert_line = lineno;
    LayerRows& l = t.by_step[step][layer];
    if (l.rows.empty()) l.first_line = lineno;
    l.rows.emplace_back(e, n);
    l.tokens += n;
    // A layer's assignments past 2^50 overflow what routing tables count in: refused, not wrapped.
    if (l.tokens > (int64_t(1) << 50))
      throw std::invalid_argument(at + "the tokens of step " + std::to_string(step) + ", layer " +
                                  std::to_string(layer) + " add up past 2^50");
  }
  for (const auto& [step, layers] : t.by_step)
    for (const auto& [layer, l] : layers)
      if (l.tokens == 0)
        throw std::invalid_argument(path + ":" + std::to_string(l.first_line) + ": step " + std::to_string(step) +
                                    ", layer " + std::to_string(layer) +
                                    " routes no tokens (its every row is 0): a routing to replay needs some");
  if (t.by_step.empty()) throw std::invalid_argument("trace file '" + path + "' has no rows");
  return t;
}


// Megatron-Core's router trace (megatron/core/transformer/moe/router_trace.py): a JSON object a
// line, {"step", "stage", "block", "layer", "rank", "num_tokens", "topk", "top_indices": a token's
// top-k expert ids a row}, "mtp_idx" on MTP records; sidecar offsets (hs_*, logit_*) ignored.
bool starts_with_brace(const std::string& path) {
  std::ifstream in(path);
  char c = 0;
  while (in.get(c))
    if (!std::isspace(static_cast<unsigned char>(c))) return c == '{';
  return false;
}

// A folder's router_trace_rank{r}.jsonl, by rank.
std::vector<std::string> megatron_files(const std::string& dir) {
  static const std::regex name(R"(router_trace_rank(\d+)\.jsonl)");
  std::map<int64_t, std::string> by_rank;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string f = e.path().filename().string();
    if (std::regex_match(f, m, name)) by_rank[std::stoll(m[1].str())] = e.path().string();
  }
  if (ec) throw std::invalid_argument("cannot read trace folder '" + dir + "': " + ec.message());
  if (by_rank.empty())
    throw std::invalid_argument("trace folder '" + dir +
                                "' holds no router_trace_rank{r}.jsonl (Megatron-Core's --moe-routing-trace-path)");
  std::vector<std::string> out;
  for (const auto& [rank, f] : by_rank) out.push_back(f);
  return out;
}

int64_t whole(const nlohmann::json& j, const char* key, const std::string& at) {
  if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 0)
    throw std::invalid_argument(at + key + ": expected a whole number >= 0");
  return j[key].get<int64_t>();
}

ParsedTrace parse_megatron_trace(const std::vector<std::string>& files) {
  ParsedTrace t;
  t.megatron = true;
  std::set<int64_t> ranks, layer_ids;
  struct Record {
    int64_t step, layer;
    std::map<int64_t, int64_t> counts;
    int64_t assignments;
    std::string where;
  };
  std::vector<Record> records;
  for (const auto& file : files) {
    std::ifstream in(file);
    if (!in) throw std::invalid_argument("cannot read trace file '" + file + "': " + std::strerror(errno));
    int lineno = 0;
    for (std::string line; std::getline(in, line);) {
      ++lineno;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string at = file + ":" + std::to_string(lineno) + ": ";
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        throw std::invalid_argument(at + "not a JSON object (a Megatron-Core router trace has one a line)");
      const int64_t step = whole(j, "step", at), layer = whole(j, "layer", at), rank = whole(j, "rank", at);
      const int64_t tokens = whole(j, "num_tokens", at), topk = whole(j, "topk", at);
      if (j.contains("mtp_idx") || j.value("block", "decoder") == "mtp") {
        ++t.mtp_records;  // an MTP module's router: not a decoder layer
        continue;
      }
      if (t.topk == 0) t.topk = topk;
      if (topk != t.topk)
        throw std::invalid_argument(at + "topk: " + std::to_string(topk) + ", the trace's others " +
                                    std::to_string(t.topk));
      const auto& ids = j.contains("top_indices") ? j["top_indices"] : nlohmann::json();
      if (!ids.is_array() || int64_t(ids.size()) != tokens)
        throw std::invalid_argument(at + "top_indices: expected num_tokens (" + std::to_string(tokens) + ") rows");
      Record r{step, layer, {}, tokens * topk, at};
      for (const auto& row : ids) {
        if (!row.is_array() || int64_t(row.size()) != topk)
          throw std::invalid_argument(at + "top_indices: a row of " + std::to_string(row.size()) +
                                      " ids, expected topk (" + std::to_string(topk) + ")");
        for (const auto& e : row) {
          if (!e.is_number_integer() || e.get<int64_t>() < 0)
            throw std::invalid_argument(at + "top_indices: expert ids are whole numbers >= 0");
          const int64_t id = e.get<int64_t>();
          ++r.counts[id];
          if (id > t.max_expert) t.max_expert = id, t.max_expert_line = lineno, t.max_expert_where = at;
        }
      }
      ranks.insert(rank), layer_ids.insert(layer);
      records.push_back(std::move(r));
    }
  }
  if (records.empty())
    throw std::invalid_argument("trace '" + files.front() + "' has no decoder layer's record" +
                                (t.mtp_records ? " (only MTP records)" : ""));
  t.ranks = int64_t(ranks.size());
  t.layer_ids.assign(layer_ids.begin(), layer_ids.end());
  // Its decoder layers in their order: the model's MoE layers from the first.
  std::map<int64_t, int64_t> index;
  for (const int64_t id : t.layer_ids) index.emplace(id, int64_t(index.size()));
  for (const Record& r : records) {
    LayerRows& l = t.by_step[r.step][index.at(r.layer)];
    if (l.rows.empty()) l.where = r.where;
    for (const auto& [e, n] : r.counts) l.rows.emplace_back(e, n);
    l.tokens += r.assignments;
  }
  for (const auto& [step, layers] : t.by_step)
    for (const auto& [layer, l] : layers)
      if (l.tokens == 0)
        throw std::invalid_argument(l.where + "step " + std::to_string(step) + ", decoder layer " +
                                    std::to_string(t.layer_ids[size_t(layer)]) +
                                    " routes no tokens on any rank: a routing to replay needs some");
  return t;
}

}  // namespace

// Parsed once per file and version: a stepped replay reads it for every layer of every step.
const ParsedTrace& trace_of(const std::string& path) {
  // A regular file (or a folder of them) of bounded size: /dev/zero or a FIFO would read forever.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw std::invalid_argument("cannot read trace file '" + path + "': " + std::strerror(errno));
  const bool folder = S_ISDIR(st.st_mode);
  if (!folder && !S_ISREG(st.st_mode)) throw std::invalid_argument("trace file '" + path + "' is not a regular file");
  const std::vector<std::string> files = folder ? megatron_files(path) : std::vector<std::string>{path};
  int64_t size = 0, stamp = 0;
  for (const auto& f : files) {
    struct stat fs {};
    if (::stat(f.c_str(), &fs) != 0 || !S_ISREG(fs.st_mode))
      throw std::invalid_argument("trace file '" + f + "' is not a regular file");
    size += int64_t(fs.st_size);
    stamp = std::max<int64_t>(stamp, int64_t(fs.st_mtim.tv_sec) * 1000000000 + fs.st_mtim.tv_nsec);
  }
  if (size > (int64_t(1) << 28)) throw std::invalid_argument("trace '" + path + "' is larger than 256 MiB");
  static std::map<std::string, std::pair<std::pair<int64_t, int64_t>, ParsedTrace>> cache;
  const std::pair<int64_t, int64_t> version{size, stamp};
  auto it = cache.find(path);
  if (it == cache.end() || it->second.first != version)
    it = cache
             .insert_or_assign(path, std::make_pair(version, folder || starts_with_brace(path)
                                                                 ? parse_megatron_trace(files)
                                                                 : parse_csv_trace(path)))
             .first;
  return it->second.second;
}

}  // namespace memfine
