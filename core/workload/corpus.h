// Real text for `memfine train`: an English corpus installed as a Debian package, read into a
// fixed train/validation split and tokenized as bytes (vocab 256: no tokenizer to train, to save
// or to get wrong; deterministic by construction).
//
// The default corpus is Debian's `fortunes` package (/usr/share/games/fortunes): about 2.4 MB of
// English prose (quotations, definitions, jokes) in plain files, 2.6 MB installed, so CI installs
// it in seconds; `linux-doc-*` is 190 MB and WordNet's glosses need parsing. Entries are
// separated by lines holding "%"; every 20th entry (in file-name order) is held out, so the split
// does not depend on any seed.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace memfine {

struct Corpus {
  std::string dir;
  std::vector<std::string> files;  // read, in name order
  at::Tensor train, validation;    // int64 byte values, entries joined by "\n"
  int64_t entries_train = 0, entries_validation = 0;
};

// Reads every plain file of `dir` (symlinks and fortune's .dat indexes skipped). Throws
// std::runtime_error naming the Debian package when the folder is missing or empty.
Corpus read_corpus(const std::string& dir);

// Why `dir` cannot train sequences of `seq` tokens ("" when it can): read it, and both splits must
// hold a sequence and its next token.
std::string corpus_problem(const std::string& dir, int64_t seq);

// `batch` sequences of `seq + 1` consecutive tokens of `text` (inputs are the first `seq`, targets
// the last `seq`), at offsets drawn from `seed`: [batch, seq + 1] int64.
at::Tensor sample_sequences(const at::Tensor& text, int64_t batch, int64_t seq, uint64_t seed);

}  // namespace memfine
