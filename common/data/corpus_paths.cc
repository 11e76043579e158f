#include "common/data/corpus_paths.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"

namespace trainyard::data {
namespace {

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string Where(const std::string& key, const std::string& entry) {
  return absl::StrCat(key, ": entry \"", entry, "\": ");
}

absl::Status CheckPlainAbsolute(const std::string& key, const std::string& entry, const std::string& path) {
  if (path.empty() || path.front() != '/') {
    return absl::InvalidArgumentError(Where(key, entry) + "\"" + path +
                                      "\" is not an absolute path (ranks run in different working directories)");
  }
  for (absl::string_view part : absl::StrSplit(absl::string_view(path).substr(1), '/')) {
    if (part.empty() || part == "." || part == "..") {
      return absl::InvalidArgumentError(Where(key, entry) + "\"" + path +
                                        "\" has an empty, \".\" or \"..\" component: name files by plain "
                                        "absolute paths");
    }
  }
  return absl::OkStatus();
}

// Exists and is a regular file (symbolic links followed).
absl::Status CheckFile(const std::string& key, const std::string& entry, const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(Where(key, entry) + "file " + path + " does not exist");
    return absl::InvalidArgumentError(Where(key, entry) + "cannot stat " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(Where(key, entry) + path + " is not a regular file");
  return absl::OkStatus();
}

// What one file of a "tokens" entry is, from its name.
absl::StatusOr<CorpusFileSpec> ClassifyTokens(const std::string& key, const std::string& entry,
                                              const std::string& path) {
  CorpusFileSpec f;
  f.entry = entry;
  f.path = path;
  f.format = CorpusFormat::kFlat;
  const std::string prefix = path.size() >= 4 ? path.substr(0, path.size() - 4) : std::string();
  if (absl::EndsWith(path, ".u16")) {
    f.dtype = TokenDtype::kUint16;
  } else if (absl::EndsWith(path, ".u32")) {
    f.dtype = TokenDtype::kUint32;
  } else if (absl::EndsWith(path, ".bin")) {
    f.dtype = TokenDtype::kUint16;
    if (IsRegularFile(prefix + ".idx")) {
      f.format = CorpusFormat::kIndexed;
      f.index_path = prefix + ".idx";
    }
  } else if (absl::EndsWith(path, ".idx")) {
    f.format = CorpusFormat::kIndexed;
    f.index_path = path;
    f.path = prefix + ".bin";
    if (!IsRegularFile(f.path)) {
      return absl::NotFoundError(Where(key, entry) + "the indexed dataset " + path + " has no " + f.path +
                                 " beside it (its tokens)");
    }
  } else {
    return absl::InvalidArgumentError(Where(key, entry) + path +
                                      " does not end in .u16, .u32, .bin or .idx (dataset \"tokens\")");
  }
  return f;
}

absl::StatusOr<std::vector<std::string>> Glob(const std::string& key, const std::string& entry) {
  glob_t g;
  std::memset(&g, 0, sizeof(g));
  // GLOB_NOSORT: the order is ours (bytewise), not the locale's collation.
  const int rc = ::glob(entry.c_str(), GLOB_NOSORT | GLOB_ERR, nullptr, &g);
  std::vector<std::string> matches;
  if (rc == 0) {
    for (std::size_t i = 0; i < g.gl_pathc; ++i) matches.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && matches.empty())) {
    return absl::NotFoundError(Where(key, entry) + "the pattern matches no file");
  }
  if (rc != 0) {
    return absl::InvalidArgumentError(Where(key, entry) +
                                      (rc == GLOB_NOSPACE ? "out of memory expanding the pattern"
                                                          : "a folder of the pattern cannot be read"));
  }
  std::sort(matches.begin(), matches.end());
  return matches;
}

}  // namespace

const char* CorpusFormatName(CorpusFormat format) {
  switch (format) {
    case CorpusFormat::kText: return "text";
    case CorpusFormat::kFlat: return "flat";
    case CorpusFormat::kIndexed: return "megatron";
  }
  return "?";
}

absl::StatusOr<std::vector<CorpusFileSpec>> ResolveDatasetPath(const std::string& kind,
                                                               const std::string& path_list,
                                                               const std::string& key) {
  if (kind != "text" && kind != "tokens") {
    return absl::InvalidArgumentError(absl::StrCat(key, ": dataset \"", kind, "\" is not read from files"));
  }
  if (path_list.empty()) return absl::InvalidArgumentError(key + ": is empty: name the files to read");
  std::vector<CorpusFileSpec> files;
  for (absl::string_view part : absl::StrSplit(path_list, ',')) {
    const std::string entry(part);
    if (entry.empty()) return absl::InvalidArgumentError(key + ": \"" + path_list + "\" has an empty entry");
    TY_RETURN_IF_ERROR(CheckPlainAbsolute(key, entry, entry));
    std::vector<std::string> paths;
    if (entry.find_first_of("*?[") == std::string::npos) {
      TY_RETURN_IF_ERROR(CheckFile(key, entry, entry));
      paths.push_back(entry);
    } else {
      TY_ASSIGN_OR_RETURN(paths, Glob(key, entry));
    }
    std::set<std::string> indexed_here;  // one indexed dataset per glob, though both its files match
    for (const std::string& path : paths) {
      TY_RETURN_IF_ERROR(CheckPlainAbsolute(key, entry, path));
      TY_RETURN_IF_ERROR(CheckFile(key, entry, path));
      CorpusFileSpec f;
      if (kind == "text") {
        f.entry = entry;
        f.path = path;
        f.format = CorpusFormat::kText;
        f.dtype = TokenDtype::kUint8;
      } else {
        TY_ASSIGN_OR_RETURN(f, ClassifyTokens(key, entry, path));
        if (f.format == CorpusFormat::kIndexed && !indexed_here.insert(f.index_path).second) continue;
      }
      files.push_back(std::move(f));
    }
  }
  return files;
}

}  // namespace trainyard::data
