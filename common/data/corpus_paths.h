// From a dataset_path value to the list of files of the corpus, in corpus order.
//
// The value is a comma-separated list of entries (common/spec/rules.cc, DatasetSource),
// each an absolute path or a glob(7) pattern over one (an entry holding *, ? or [).
// Entries are taken in the listed order; a glob's matches are sorted bytewise (not by
// locale), so every rank on every machine builds the same list. An entry is an error
// when it is relative or has an empty, "." or ".." component, when a plain path does
// not exist or is not a regular file, and when a glob matches nothing.
//
// What a file is, for dataset = "tokens", comes from its name:
//   .u16, .u32   flat little-endian uint16 / uint32 tokens;
//   .bin         a Megatron indexed dataset when PREFIX.idx exists beside it, else flat
//                uint16 (nanoGPT's prepare.py writes uint16 .bin files);
//   .idx         a Megatron indexed dataset whose tokens are in PREFIX.bin;
//   other        an error naming the file and its entry.
// A glob that matches both PREFIX.bin and PREFIX.idx of one indexed dataset yields it
// once. For dataset = "text" every file is byte text. A file listed twice (two entries)
// is read twice: that is the way to up-weight it.
//
// Pure function of the file system's state; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/data/token_dtype.h"

namespace trainyard::data {

enum class CorpusFormat {
  kText,     // one byte per token
  kFlat,     // a flat array of `dtype`
  kIndexed,  // Megatron .idx + .bin; dtype comes from the .idx
};

const char* CorpusFormatName(CorpusFormat format);  // "text", "flat", "megatron"

struct CorpusFileSpec {
  std::string entry;       // the dataset_path entry that named it
  std::string path;        // the file holding the tokens (.bin of an indexed dataset)
  std::string index_path;  // the .idx of an indexed dataset, else ""
  CorpusFormat format = CorpusFormat::kFlat;
  TokenDtype dtype = TokenDtype::kUint8;  // of flat and text files; indexed: from the .idx
};

// Expands `path_list` for dataset `kind` ("text" or "tokens"). INVALID_ARGUMENT or
// NOT_FOUND "<key>: entry "E": ..." naming the entry and the file.
absl::StatusOr<std::vector<CorpusFileSpec>> ResolveDatasetPath(const std::string& kind,
                                                               const std::string& path_list,
                                                               const std::string& key);

}  // namespace trainyard::data
