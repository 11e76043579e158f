#include "client/tokenize/input_files.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/text.h"

namespace trainyard::tokenize {
namespace {

namespace fs = std::filesystem;

// Readable now, so a permission problem stops the run before any work rather than
// after an hour of it.
absl::Status CheckReadable(const std::string& input, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const std::string why = std::strerror(errno);
    if (input == path) return absl::PermissionDeniedError(absl::StrCat("input ", Quoted(input), ": cannot open: ", why));
    return absl::PermissionDeniedError(
        absl::StrCat("input ", Quoted(input), ": cannot open ", Quoted(path), ": ", why));
  }
  ::close(fd);
  return absl::OkStatus();
}

// Regular files of `dir`, recursively, matching `glob`, sorted by path.
absl::StatusOr<std::vector<std::string>> WalkFolder(const std::string& input, const std::string& glob) {
  std::vector<std::string> found;
  std::error_code ec;
  fs::recursive_directory_iterator it(input, fs::directory_options::none, ec);
  const fs::recursive_directory_iterator end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) continue;  // folders, links to folders, specials
    const std::string name = it->path().filename().string();
    if (!glob.empty() && ::fnmatch(glob.c_str(), name.c_str(), 0) != 0) continue;
    found.push_back(it->path().string());
  }
  if (ec) {
    // The iterator stops at the folder it could not open; its path is the best name.
    return absl::PermissionDeniedError(absl::StrCat("input ", Quoted(input), ": cannot read a folder under it: ",
                                                    ec.message()));
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

absl::StatusOr<InputListing> ListInputs(const std::vector<std::string>& inputs, const std::string& glob) {
  if (inputs.empty()) return absl::InvalidArgumentError("no input: name at least one file or folder");
  InputListing listing;
  std::set<std::pair<dev_t, ino_t>> seen;  // the identities of the files taken
  for (const std::string& input : inputs) {
    struct stat st {};
    if (::stat(input.c_str(), &st) != 0) {
      const int err = errno;
      if (err == ENOENT || err == ENOTDIR) {
        return absl::NotFoundError(absl::StrCat("input ", Quoted(input), ": no such file or folder"));
      }
      return absl::PermissionDeniedError(absl::StrCat("input ", Quoted(input), ": ", std::strerror(err)));
    }
    std::vector<std::string> paths;
    if (S_ISDIR(st.st_mode)) {
      absl::StatusOr<std::vector<std::string>> walked = WalkFolder(input, glob);
      if (!walked.ok()) return walked.status();
      if (walked->empty()) {
        return absl::NotFoundError(glob.empty() ? absl::StrCat("input ", Quoted(input), ": the folder holds no file")
                                                : absl::StrCat("input ", Quoted(input), ": no file matches --glob ",
                                                               Quoted(glob)));
      }
      paths = std::move(*walked);
    } else if (S_ISREG(st.st_mode)) {
      paths.push_back(input);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("input ", Quoted(input), " is not a regular file or folder"));
    }
    for (std::string& path : paths) {
      struct stat fst {};
      if (::stat(path.c_str(), &fst) != 0) {
        return absl::NotFoundError(
            absl::StrCat("input ", Quoted(input), ": ", Quoted(path), ": ", std::strerror(errno)));
      }
      // Each file is read once: a link to a file already taken, or a file named twice,
      // adds nothing the dataset lacks.
      if (!seen.emplace(fst.st_dev, fst.st_ino).second) {
        ++listing.duplicates;
        continue;
      }
      if (absl::Status s = CheckReadable(input, path); !s.ok()) return s;
      listing.total_bytes += fst.st_size;
      if (fst.st_size == 0) ++listing.empty_files;
      listing.files.push_back(InputFile{std::move(path), static_cast<std::int64_t>(fst.st_size)});
    }
  }
  return listing;
}

}  // namespace trainyard::tokenize
