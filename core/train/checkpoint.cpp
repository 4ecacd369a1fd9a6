#include "core/train/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include "core/dist/dist.h"
#include "core/record/results.h"
#include "core/run/rank_step.h"
#include "core/util/hash.h"

namespace memfine {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kFormat = "memfine-checkpoint-2";

std::vector<at::Tensor> state_tensors(const TrainState& st) {
  std::vector<at::Tensor> all = st.adam->params();
  for (const auto& m : st.adam->first_moments()) all.push_back(m);
  for (const auto& v : st.adam->second_moments()) all.push_back(v);
  for (const auto& l : st.model.layers)
    if (l.expert_bias.defined()) all.push_back(l.expert_bias);
  return all;
}

std::string checksum(const json& head_without_it, const std::string& data) {
  const std::string h = head_without_it.dump();
  return hex64(hash_bytes(data.data(), data.size(), hash_bytes(h.data(), h.size())));
}

// The largest of its kind: a checkpoint's JSON head is a few KB.
constexpr size_t kMaxHead = size_t(1) << 24;

struct Refused : std::runtime_error {
  Refused(const std::string& path, const std::string& why)
      : std::runtime_error(path + ": " + why + "; remove it, and the run replays from its records") {}
};

// `head`'s field `key` of the given JSON type, or refused naming it.
const json& field(const std::string& path, const json& head, const char* key, json::value_t type, const char* what) {
  if (!head.contains(key) || head[key].type() != type)
    throw Refused(path, std::string("its '") + key + "' is not " + what);
  return head[key];
}

// The bytes a head's tensors hold (numel x the dtype's size), or refused naming what is wrong.
int64_t data_bytes(const std::string& path, const json& tensors) {
  static const std::map<std::string, int64_t> sizes = {{"Float", 4}, {"Double", 8}, {"BFloat16", 2},
                                                       {"Half", 2},  {"Long", 8},   {"Int", 4}};
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const json& t = tensors[i];
    const json numel = t.is_object() ? t.value("numel", json()) : json();
    const json dtype = t.is_object() ? t.value("dtype", json()) : json();
    auto it = dtype.is_string() ? sizes.find(dtype.get<std::string>()) : sizes.end();
    if (!numel.is_number_integer() || numel.get<int64_t>() < 0 || numel.get<int64_t>() > (int64_t(1) << 40) ||
        it == sizes.end())
      throw Refused(path, "tensor " + std::to_string(i) + " of its head has no numel and dtype of this build");
    total += numel.get<int64_t>() * it->second;
  }
  return total;
}

void save_file(const std::string& path, const TrainState& st, const std::string& point, const std::string& strategy,
               const std::string& digest, int64_t step) {
  const std::vector<at::Tensor> ts = state_tensors(st);
  json head = {{"format", kFormat},       {"point", point}, {"strategy", strategy},
               {"config", digest},        {"step", step},   {"adam_steps", st.adam->steps_taken()},
               {"tensors", json::array()}};
  std::string data;
  for (const auto& t : ts) {
    const at::Tensor c = t.detach().contiguous().cpu();
    head["tensors"].push_back({{"numel", c.numel()}, {"dtype", std::string(c10::toString(c.scalar_type()))}});
    data.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
  }
  head["checksum"] = checksum(head, data);
  replace_file(path, head.dump() + "\n" + data);
}

// A whole checkpoint of this run and configuration, read and checked; nothing is loaded yet.
struct File {
  int64_t step = -1, adam_steps = 0;
  json tensors;
  std::string data;
};

File read_file(const std::string& path, const std::string& point, const std::string& strategy,
               const std::string& digest) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) throw Refused(path, std::string("cannot read: ") + std::strerror(errno));
  if (!S_ISREG(sb.st_mode)) throw Refused(path, "not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Refused(path, std::string("cannot read: ") + std::strerror(errno));
  std::string line;
  char ch;
  while (line.size() <= kMaxHead && in.get(ch) && ch != '\n') line += ch;
  json head;
  try {
    head = json::parse(line);
  } catch (const json::exception&) {
    throw Refused(path, "not a memfine checkpoint (its first line is not its JSON head)");
  }
  if (!head.is_object()) throw Refused(path, "not a memfine checkpoint (its head is not a JSON object)");
  const std::string format = head.value("format", json()).is_string() ? head["format"].get<std::string>() : "";
  if (format != kFormat) throw Refused(path, "format '" + format + "', not '" + kFormat + "' (what this build writes)");
  const std::string sum = field(path, head, "checksum", json::value_t::string, "a string").get<std::string>();
  const std::string its_point = field(path, head, "point", json::value_t::string, "a string").get<std::string>();
  const std::string its_strategy = field(path, head, "strategy", json::value_t::string, "a string").get<std::string>();
  const json step = head.contains("step") ? head["step"] : json();
  const json adam = head.contains("adam_steps") ? head["adam_steps"] : json();
  if (!step.is_number_integer() || step.get<int64_t>() < 0) throw Refused(path, "its 'step' is not an integer >= 0");
  if (!adam.is_number_integer() || adam.get<int64_t>() < 0)
    throw Refused(path, "its 'adam_steps' is not an integer >= 0");
  File f;
  f.tensors = field(path, head, "tensors", json::value_t::array, "a list");
  f.data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  // Its tensors say how long it is: bytes past that were added to it (its checksum need not say so
  // first: a tool may have summed them in).
  if (const int64_t whole = data_bytes(path, f.tensors); int64_t(f.data.size()) != whole)
    throw Refused(
        path, std::string(int64_t(f.data.size()) > whole ? "bytes were added after its end" : "it is cut short") +
                  " (" + std::to_string(f.data.size()) + " bytes of data, its tensors hold " + std::to_string(whole) +
                  ")");
  json unsummed = head;
  unsummed.erase("checksum");
  if (checksum(unsummed, f.data) != sum)
    throw Refused(path, "its checksum does not match its bytes: the file is damaged");
  // Whole: now it must be this run's.
  if (its_point != point || its_strategy != strategy)
    throw Refused(path, "a checkpoint of another run (point '" + its_point + "', strategy '" + its_strategy + "')");
  if (head.value("config", std::string()) != digest)
    throw Refused(path, "a checkpoint of this run under another configuration");
  f.step = step.get<int64_t>(), f.adam_steps = adam.get<int64_t>();
  return f;
}

// Loads `f` into `st` once its tensors are checked against this model's.
void apply(const std::string& path, const File& f, TrainState& st) {
  const std::vector<at::Tensor> ts = state_tensors(st);
  if (f.tensors.size() != ts.size()) throw Refused(path, "it holds another model's state");
  size_t bytes = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const json& t = f.tensors[i];
    if (!t.is_object() || !t.value("numel", json()).is_number_integer() || t["numel"].get<int64_t>() != ts[i].numel() ||
        t.value("dtype", json()) != std::string(c10::toString(ts[i].scalar_type())))
      throw Refused(path, "tensor " + std::to_string(i) + " has another shape or type than this model's");
    bytes += ts[i].nbytes();
  }
  if (bytes != f.data.size())
    throw Refused(path,
                  "its data has " + std::to_string(f.data.size()) + " bytes, its tensors " + std::to_string(bytes));
  at::NoGradGuard no_grad;
  size_t off = 0;
  for (const auto& t : ts) {
    at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU));
    std::memcpy(host.data_ptr(), f.data.data() + off, host.nbytes());
    off += host.nbytes();
    at::Tensor dst = t;
    dst.copy_(host);
  }
  st.adam->set_steps_taken(f.adam_steps);
}

}  // namespace

Checkpoints::Checkpoints(std::string base, const Dist* dist, std::string point, std::string strategy,
                         std::string digest)
    : base_(std::move(base)),
      point_(std::move(point)),
      strategy_(std::move(strategy)),
      digest_(std::move(digest)),
      dist_(dist) {}

std::string Checkpoints::path(int64_t step) const {
  if (!dist_) return base_ + ".ckpt";
  return base_ + ".rank" + std::to_string(dist_->rank()) + ".step" + std::to_string(step) + ".ckpt";
}

std::vector<int64_t> Checkpoints::steps() const {
  std::vector<int64_t> out;
  std::error_code ec;
  const std::string pre = fs::path(base_).filename().string() + ".rank" + std::to_string(dist_->rank()) + ".step";
  for (const auto& e : fs::directory_iterator(fs::path(base_).parent_path(), ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(pre, 0) != 0 || n.size() <= pre.size() + 5 || n.substr(n.size() - 5) != ".ckpt") continue;
    const std::string digits = n.substr(pre.size(), n.size() - pre.size() - 5);
    if (!digits.empty() && digits.size() < 18 && std::all_of(digits.begin(), digits.end(), ::isdigit))
      out.push_back(std::stoll(digits));
  }
  std::sort(out.begin(), out.end());
  return out;
}

void Checkpoints::remove(int64_t step) const {
  std::error_code ec;
  fs::remove(path(step), ec);
}

int64_t Checkpoints::load(TrainState& st, int64_t last) const {
  if (!dist_) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(path(0), ec))) return -1;
    const File f = read_file(path(0), point_, strategy_, digest_);
    if (f.step > last) {  // ahead of the records (they lost their last lines): not a state they describe
      std::cerr << "memfine train: " << path(0) << ": taken after step " << f.step << ", past the last recorded step ("
                << last << "): removed; the run replays from its records\n";
      remove(0);
      return -1;
    }
    apply(path(0), f, st);
    return f.step;
  }
  // Real ranks: the newest step at or before `last` that every rank has.
  int64_t mine = -1;
  for (int64_t s : steps()) {
    if (s > last)
      remove(s);
    else
      mine = s;
  }
  int64_t agreed = -dist_->allreduce_max(at::tensor({-mine}, at::kLong)).item<int64_t>();
  const bool have = agreed >= 0 && fs::exists(path(agreed));
  if (dist_->allreduce_max(at::tensor({int64_t(!have)}, at::kLong)).item<int64_t>() > 0) agreed = -1;
  if (agreed < 0) return -1;
  const File f = read_file(path(agreed), point_, strategy_, digest_);
  if (f.step != agreed)
    throw Refused(path(agreed),
                  "its head says step " + std::to_string(f.step) + ", its name " + std::to_string(agreed));
  apply(path(agreed), f, st);
  return f.step;
}

void Checkpoints::save(const TrainState& st, int64_t step) const {
  save_file(path(step), st, point_, strategy_, digest_, step);
  if (!dist_) return;
  at::Tensor done = at::ones({1});
  dist_->allreduce_sum(done);  // every rank has this step's
  for (int64_t s : steps())
    if (s < step) remove(s);
}

void Checkpoints::remove_all() const {
  if (!dist_) return remove(0);
  for (int64_t s : steps()) remove(s);
}

}  // namespace memfine
