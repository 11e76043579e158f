// The files a tokenize run reads, from its INPUT arguments, in a reproducible order.
//
// INPUTs are taken in the order given. A file is itself (whatever its name). A folder
// is walked recursively; its regular files (and symbolic links to them) whose name
// matches `glob` (fnmatch(3) on the name, not the path; every file when `glob` is
// empty) are taken sorted bytewise by path. Symbolic links to folders are not followed
// (no cycles); sockets, FIFOs and devices inside folders are skipped. Each file is taken
// once: a later occurrence of one already taken (named twice, or reached again through
// a symbolic or hard link) is skipped and counted.
//
// Pure apart from reading the file system; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainyard::tokenize {

struct InputFile {
  std::string path;
  std::int64_t size = 0;  // at listing time, for the progress display
};

struct InputListing {
  std::vector<InputFile> files;
  std::int64_t total_bytes = 0;
  int empty_files = 0;
  int duplicates = 0;  // occurrences skipped
};

// Errors name the INPUT: "input 'x': no such file or folder", "... is not a regular
// file or folder", "... cannot open: Permission denied", "input 'd': cannot read
// a folder under it: ...", "input 'd': no file matches --glob '*.py'", and with no
// INPUT at all, "no input".
absl::StatusOr<InputListing> ListInputs(const std::vector<std::string>& inputs, const std::string& glob);

}  // namespace trainyard::tokenize
