#include "core/workload/corpus.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace memfine {

namespace fs = std::filesystem;

namespace {
constexpr int64_t kHoldOutEvery = 20;

std::string missing(const std::string& dir, const std::string& what) {
  return "corpus " + dir + ": " + what +
         " (the default corpus is Debian's 'fortunes' package: apt-get install fortunes, or scripts/setup-deps)";
}

at::Tensor bytes_tensor(const std::string& s) {
  at::Tensor t = at::empty({int64_t(s.size())}, at::kLong);
  int64_t* p = t.data_ptr<int64_t>();
  for (size_t i = 0; i < s.size(); ++i) p[i] = static_cast<unsigned char>(s[i]);
  return t;
}
}  // namespace

Corpus read_corpus(const std::string& dir) {
  Corpus c;
  c.dir = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw std::runtime_error(missing(dir, "no such folder"));
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && !e.is_symlink() && e.path().extension() != ".dat") c.files.push_back(e.path().string());
  if (ec) throw std::runtime_error(missing(dir, ec.message()));
  std::sort(c.files.begin(), c.files.end());
  std::string train, val;
  int64_t entry = 0;
  for (const auto& f : c.files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw std::runtime_error("corpus: cannot read " + f);
    std::string line, text;
    auto flush = [&] {
      if (text.empty()) return;
      (entry % kHoldOutEvery == kHoldOutEvery - 1 ? val : train) += text + "\n";
      (entry % kHoldOutEvery == kHoldOutEvery - 1 ? c.entries_validation : c.entries_train) += 1;
      ++entry, text.clear();
    };
    while (std::getline(in, line)) {
      if (line == "%")
        flush();
      else
        text += line + "\n";
    }
    flush();
  }
  if (train.empty() || val.empty()) throw std::runtime_error(missing(dir, "holds no text"));
  c.train = bytes_tensor(train);
  c.validation = bytes_tensor(val);
  return c;
}

std::string corpus_problem(const std::string& dir, int64_t seq) {
  Corpus c;
  try {
    c = read_corpus(dir);
  } catch (const std::exception& e) {
    return e.what();
  }
  for (const auto* split : {&c.train, &c.validation})
    if (split->numel() < seq + 2)
      return "corpus " + dir + ": its " + (split == &c.train ? "training" : "held-out") + " split has " +
             std::to_string(split->numel()) +
             " byte tokens, too few for one sequence of model.seq + 1 = " + std::to_string(seq + 1) + " (every " +
             std::to_string(kHoldOutEvery) + "th entry is held out)";
  return "";
}

at::Tensor sample_sequences(const at::Tensor& text, int64_t batch, int64_t seq, uint64_t seed) {
  const int64_t n = text.numel() - seq - 1;
  if (n <= 0)
    throw std::runtime_error("corpus: " + std::to_string(text.numel()) + " tokens cannot hold a sequence of " +
                             std::to_string(seq + 1));
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor start = at::randint(n, {batch, 1}, gen, at::TensorOptions(at::kLong));
  return text.index_select(0, (start + at::arange(seq + 1, at::kLong)).reshape(-1)).view({batch, seq + 1});
}

}  // namespace memfine
