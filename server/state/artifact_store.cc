// The controller's artifact store: files, uploads and checks (the SQLite index is
// artifact_index.cc); see artifact_store.h for the layout, the states and the thread
// contract.
#include "server/state/artifact_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/proto_time.h"
#include "common/base/sha256.h"
#include "common/spec/spec_error.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "server/policy/request_validation.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxNameBytes = 128;
constexpr size_t kMaxWorkerBytes = 128;

absl::Status Invalid(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("ArtifactHeader.", std::string(field), ": ", std::string(what)));
}

bool SafeChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}
bool Alnum(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// A path component of our own making: [A-Za-z0-9][A-Za-z0-9._-]*.
bool IsSafeComponent(std::string_view s) {
  if (s.empty() || !Alnum(s[0])) return false;
  for (char c : s) {
    if (!SafeChar(c)) return false;
  }
  return true;
}

std::string Key(const std::string& job_id, const std::string& name) { return job_id + "/" + name; }

std::string ErrnoText(int err) { return std::strerror(err); }

// fsync of a directory, so a create or rename in it is durable.
absl::Status SyncDir(const std::string& dir) { return FsyncPath(dir, /*directory=*/true); }

// Creates (or truncates to 0) `path` and makes the entry durable.
absl::Status CreateEmpty(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("create ", path, ": ", ErrnoText(errno)));
  ::close(fd);
  TY_RETURN_IF_ERROR(FsyncPath(path));
  return SyncDir(fs::path(path).parent_path().string());
}

// Size of a regular file; nullopt when it does not exist.
std::optional<int64_t> FileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return static_cast<int64_t>(st.st_size);
}

v1::ArtifactStatus MakeStatus(int64_t committed, bool complete) {
  v1::ArtifactStatus s;
  s.set_committed_bytes(committed);
  s.set_complete(complete);
  return s;
}

}  // namespace

bool SameArtifactHeader(const v1::ArtifactHeader& a, const v1::ArtifactHeader& b) {
  return a.job_id() == b.job_id() && a.name() == b.name() && a.kind() == b.kind() &&
         a.attempt() == b.attempt() && a.rank() == b.rank() && a.size_bytes() == b.size_bytes() &&
         a.sha256() == b.sha256() && a.worker() == b.worker();
}

// ---------------------------------------------------------------------------------------
// ArtifactUpload

ArtifactUpload::~ArtifactUpload() {
  if (fd_ >= 0) ::close(fd_);
  store_->Release(Key(header_.job_id(), header_.name()));
}

v1::ArtifactStatus ArtifactUpload::Status() const { return MakeStatus(committed_, complete_); }

absl::StatusOr<v1::ArtifactStatus> ArtifactUpload::Append(int64_t offset, std::string_view data) {
  if (complete_) {
    return absl::FailedPreconditionError(absl::StrCat("artifact ", header_.name(), " is already complete"));
  }
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the upload of ", header_.name(), " ended with an error; call OpenArtifact again"));
  }
  if (static_cast<int64_t>(data.size()) > kMaxArtifactChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat("ArtifactChunk.data: ", data.size(), " bytes, more than the ",
                                                   kMaxArtifactChunkBytes, " a chunk may carry"));
  }
  if (offset != committed_) {
    return absl::FailedPreconditionError(absl::StrCat("ArtifactChunk.offset is ", offset, ", expected ", committed_,
                                                      " (the bytes committed): call OpenArtifact to resume"));
  }
  if (static_cast<int64_t>(data.size()) > header_.size_bytes() - committed_) {
    return absl::InvalidArgumentError(absl::StrCat("ArtifactChunk.data: ", data.size(), " bytes at offset ", offset,
                                                   " pass size_bytes ", header_.size_bytes()));
  }
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::pwrite(fd_, data.data() + done, data.size() - done, committed_ + static_cast<int64_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      if (::ftruncate(fd_, committed_) != 0) {
        spdlog::error("artifact {}/{}: cannot cut the part back to {} bytes", header_.job_id(), header_.name(),
                      committed_);
      }
      return absl::InternalError(absl::StrCat("writing artifact ", header_.name(), ": ", ErrnoText(err)));
    }
    done += static_cast<size_t>(n);
  }
  if (!data.empty() && ::fdatasync(fd_) != 0) {
    const int err = errno;
    ::ftruncate(fd_, committed_);
    return absl::InternalError(absl::StrCat("fdatasync of artifact ", header_.name(), ": ", ErrnoText(err)));
  }
  committed_ += static_cast<int64_t>(data.size());
  if (committed_ < header_.size_bytes()) return Status();
  ::close(fd_);
  fd_ = -1;
  TY_ASSIGN_OR_RETURN(v1::ArtifactStatus status, store_->Finish(header_));
  complete_ = true;
  return status;
}

// ---------------------------------------------------------------------------------------
// ArtifactStore: opening and reconciling

absl::StatusOr<std::unique_ptr<ArtifactStore>> ArtifactStore::Open(const std::string& data_dir, JobManager* manager,
                                                                   Clock* clock, ArtifactStoreOptions options) {
  const std::string root = (fs::path(data_dir) / "artifacts").string();
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("cannot create ", root, ": ", ec.message()));
  TY_ASSIGN_OR_RETURN(auto db, SqliteDb::Open((fs::path(data_dir) / "trainyard.db").string()));
  std::unique_ptr<ArtifactStore> store(new ArtifactStore(root, std::move(db), manager, clock, options));
  TY_RETURN_IF_ERROR(store->InitSchema());
  TY_RETURN_IF_ERROR(store->Reconcile());
  return store;
}

std::string ArtifactStore::DirOf(const std::string& job_id) const { return root_ + "/" + job_id; }
std::string ArtifactStore::PathOf(const std::string& job_id, const std::string& name) const {
  return DirOf(job_id) + "/" + name;
}
std::string ArtifactStore::PartOf(const std::string& job_id, const std::string& name) const {
  return PathOf(job_id, name) + kArtifactPartSuffix;
}

absl::Status ArtifactStore::Reconcile() {
  absl::MutexLock lock(&mu_);
  TY_ASSIGN_OR_RETURN(const std::vector<Row> all, AllRowsLocked());
  struct Found {
    std::string job_id, name;
    bool complete = false;
    int64_t size = 0;
  };
  std::vector<Found> rows;
  for (const Row& row : all) {
    rows.push_back({row.header.job_id(), row.header.name(), row.complete, row.header.size_bytes()});
  }
  absl::flat_hash_set<std::string> keep;  // files a row accounts for, as "JOB/FILE"
  for (const Found& r : rows) {
    if (!IsSafeComponent(r.job_id) || !NameProblem(r.name).empty()) {
      spdlog::warn("artifacts: dropping a row with an unusable path ({}/{})", Quote(r.job_id),
                   Quote(r.name));
      TY_RETURN_IF_ERROR(DeleteRowLocked(r.job_id, r.name));
      continue;
    }
    const std::string final_path = PathOf(r.job_id, r.name);
    const std::string part = PartOf(r.job_id, r.name);
    if (r.complete) {
      if (!FileSize(final_path)) {
        spdlog::warn("artifacts: {}/{} is indexed but its file is gone; dropping the row", r.job_id, r.name);
        TY_RETURN_IF_ERROR(DeleteRowLocked(r.job_id, r.name));
        continue;
      }
      keep.insert(Key(r.job_id, r.name));
      continue;
    }
    keep.insert(Key(r.job_id, r.name + kArtifactPartSuffix));
    if (FileSize(part)) continue;
    std::error_code ec;
    fs::create_directories(DirOf(r.job_id), ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create ", DirOf(r.job_id), ": ", ec.message()));
    if (FileSize(final_path) == r.size) {
      // Renamed, but the row was not marked: the part again, so the next Open finishes
      // it (hash, index, event).
      TY_RETURN_IF_ERROR(RenameDurably(final_path, part));
      continue;
    }
    TY_RETURN_IF_ERROR(CreateEmpty(part));  // committed 0
  }
  // Files no row accounts for: leftovers of a crash (a part created before its row was
  // committed, a dropped row).
  std::error_code ec;
  for (const auto& job_dir : fs::directory_iterator(root_, ec)) {
    if (!job_dir.is_directory()) continue;
    const std::string job_id = job_dir.path().filename().string();
    std::error_code inner;
    for (const auto& file : fs::directory_iterator(job_dir.path(), inner)) {
      if (!file.is_regular_file()) continue;
      const std::string fname = file.path().filename().string();
      if (keep.contains(Key(job_id, fname))) continue;
      spdlog::warn("artifacts: removing {}, which no row indexes", file.path().string());
      fs::remove(file.path(), inner);
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Checks

std::string ArtifactStore::NameProblem(std::string_view name) {
  if (name.empty()) return "is empty";
  if (name.size() > kMaxNameBytes) {
    return absl::StrCat("is ", name.size(), " bytes, more than the ", kMaxNameBytes, " allowed: ", Quote(name));
  }
  if (!IsSafeComponent(name)) {
    return absl::StrCat("must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}, got ", Quote(name));
  }
  if (absl::EndsWith(absl::string_view(name.data(), name.size()), kArtifactPartSuffix)) {
    return absl::StrCat("must not end in \"", kArtifactPartSuffix, "\" (partial uploads do), got ", Quote(name));
  }
  return "";
}

absl::Status ArtifactStore::CheckHeader(const v1::ArtifactHeader& h) const {
  TY_RETURN_IF_ERROR(request_validation::CheckJobId("ArtifactHeader.job_id", h.job_id()));
  if (!IsSafeComponent(h.job_id())) return Invalid("job_id", absl::StrCat("is not a job id: ", Quote(h.job_id())));
  if (std::string p = NameProblem(h.name()); !p.empty()) return Invalid("name", p);
  if (h.kind() != "trace" && h.kind() != "flight_recorder") {
    return Invalid("kind", absl::StrCat("must be \"trace\" or \"flight_recorder\", got ", Quote(h.kind())));
  }
  if (h.attempt() < 1) return Invalid("attempt", absl::StrCat("must be >= 1, got ", h.attempt()));
  if (h.rank() < -1) return Invalid("rank", absl::StrCat("must be >= -1 (-1: the worker's own file), got ", h.rank()));
  if (h.size_bytes() < 0 || h.size_bytes() > options_.max_file_bytes) {
    return Invalid("size_bytes",
                   absl::StrCat("must be in [0, ", options_.max_file_bytes, "], got ", h.size_bytes()));
  }
  if (!IsSha256Hex(h.sha256())) {
    return Invalid("sha256", absl::StrCat("must be 64 lowercase hex characters, got ", Quote(h.sha256())));
  }
  if (h.worker().empty()) return Invalid("worker", "is empty");
  if (h.worker().size() > kMaxWorkerBytes) {
    return Invalid("worker", absl::StrCat("is ", h.worker().size(), " bytes, more than the ", kMaxWorkerBytes,
                                          " allowed: ", Quote(h.worker())));
  }
  return absl::OkStatus();
}

absl::Status ArtifactStore::CheckAgainstJob(const v1::ArtifactHeader& h) {
  TY_ASSIGN_OR_RETURN(v1::Job job, manager_->Get(h.job_id()));
  if (h.attempt() > job.attempt()) {
    return Invalid("attempt", absl::StrCat("is ", h.attempt(), "; job ", h.job_id(), " has run ", job.attempt(),
                                           " attempt(s)"));
  }
  if (h.rank() >= job.world_size()) {
    return Invalid("rank", absl::StrCat("is ", h.rank(), "; job ", h.job_id(), " has ", job.world_size(), " ranks"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Uploads

absl::StatusOr<v1::ArtifactStatus> ArtifactStore::OpenArtifact(const v1::ArtifactHeader& h) {
  TY_RETURN_IF_ERROR(CheckHeader(h));
  TY_RETURN_IF_ERROR(CheckAgainstJob(h));
  const std::string key = Key(h.job_id(), h.name());
  const std::string part = PartOf(h.job_id(), h.name());
  int64_t refused_with = -1;  // the job's bytes, when over the cap
  {
    absl::MutexLock lock(&mu_);
    TY_ASSIGN_OR_RETURN(std::optional<Row> row, ReadRowLocked(h.job_id(), h.name()));
    if (row && row->complete) {
      if (row->header.sha256() == h.sha256() && row->header.size_bytes() == h.size_bytes()) {
        return MakeStatus(h.size_bytes(), true);
      }
      return absl::AlreadyExistsError(absl::StrCat("artifact ", h.name(), " of job ", h.job_id(),
                                                   " is stored with another sha256 (", row->header.sha256(), ")"));
    }
    if (row && !SameArtifactHeader(row->header, h)) {
      if (uploading_.contains(key)) {
        return absl::AbortedError(absl::StrCat("artifact ", h.name(), " is being uploaded with another header"));
      }
      spdlog::info("artifact {}: a new header replaces the partial upload (sha256 {} -> {})", key,
                   row->header.sha256(), h.sha256());
      ::unlink(part.c_str());
      TY_RETURN_IF_ERROR(DeleteRowLocked(h.job_id(), h.name()));
      row.reset();
    }
    if (row) {
      std::optional<int64_t> size = FileSize(part);
      if (uploading_.contains(key)) return MakeStatus(size.value_or(0), false);
      if (!size || *size > h.size_bytes()) {
        TY_RETURN_IF_ERROR(CreateEmpty(part));
        size = 0;
      }
      if (*size < h.size_bytes()) return MakeStatus(*size, false);
      uploading_.insert(key);  // every byte is there: finish it below
    } else {
      TY_ASSIGN_OR_RETURN(int64_t files, JobFilesLocked(h.job_id()));
      if (files >= options_.files_per_job) {
        return absl::ResourceExhaustedError(absl::StrCat("job ", h.job_id(), " already holds ", files,
                                                         " artifacts, the most one job may have"));
      }
      TY_ASSIGN_OR_RETURN(int64_t used, JobBytesLocked(h.job_id()));
      if (used + h.size_bytes() > options_.bytes_per_job) {
        refused_with = used;
      } else {
        std::error_code ec;
        fs::create_directories(DirOf(h.job_id()), ec);
        if (ec) return absl::InternalError(absl::StrCat("cannot create ", DirOf(h.job_id()), ": ", ec.message()));
        TY_RETURN_IF_ERROR(SyncDir(root_));
        TY_RETURN_IF_ERROR(CreateEmpty(part));
        TY_RETURN_IF_ERROR(InsertPartialLocked(h));
        if (h.size_bytes() > 0) return MakeStatus(0, false);
        uploading_.insert(key);  // empty: complete now
      }
    }
  }
  if (refused_with >= 0) {
    WarnRefused(h, refused_with);
    return absl::ResourceExhaustedError(absl::StrCat(
        "artifact ", h.name(), " (", h.size_bytes(), " bytes) would pass job ", h.job_id(), "'s artifact cap of ",
        options_.bytes_per_job, " bytes (", refused_with, " already held; --artifact-bytes-per-job)"));
  }
  absl::StatusOr<v1::ArtifactStatus> status = Finish(h);
  Release(key);
  return status;
}

absl::StatusOr<std::unique_ptr<ArtifactUpload>> ArtifactStore::BeginUpload(const v1::ArtifactHeader& h) {
  TY_RETURN_IF_ERROR(CheckHeader(h));
  const std::string key = Key(h.job_id(), h.name());
  const std::string part = PartOf(h.job_id(), h.name());
  absl::MutexLock lock(&mu_);
  TY_ASSIGN_OR_RETURN(std::optional<Row> row, ReadRowLocked(h.job_id(), h.name()));
  if (!row) {
    return absl::FailedPreconditionError(
        absl::StrCat("artifact ", h.name(), " of job ", h.job_id(), " was not opened: call OpenArtifact first"));
  }
  if (row->complete) {
    return absl::FailedPreconditionError(absl::StrCat("artifact ", h.name(), " is already complete"));
  }
  if (!SameArtifactHeader(row->header, h)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the header of ", h.name(), " differs from the opened one: call OpenArtifact again"));
  }
  if (uploading_.contains(key)) {
    return absl::AbortedError(absl::StrCat("artifact ", h.name(), " is being uploaded by another stream"));
  }
  int fd = ::open(part.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", part, ": ", ErrnoText(errno)));
  struct stat st;
  int64_t committed = ::fstat(fd, &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
  if (committed > h.size_bytes()) {
    if (::ftruncate(fd, 0) != 0) {
      ::close(fd);
      return absl::InternalError(absl::StrCat("truncate ", part, ": ", ErrnoText(errno)));
    }
    committed = 0;
  }
  uploading_.insert(key);
  return std::unique_ptr<ArtifactUpload>(new ArtifactUpload(this, h, fd, committed));
}

void ArtifactStore::Release(const std::string& key) {
  absl::MutexLock lock(&mu_);
  uploading_.erase(key);
}

absl::StatusOr<v1::ArtifactStatus> ArtifactStore::Finish(const v1::ArtifactHeader& h) {
  const std::string part = PartOf(h.job_id(), h.name());
  const std::string final_path = PathOf(h.job_id(), h.name());
  TY_ASSIGN_OR_RETURN(std::string digest, Sha256File(part, h.size_bytes()));
  if (digest != h.sha256()) {
    ::unlink(part.c_str());
    absl::MutexLock lock(&mu_);
    TY_RETURN_IF_ERROR(DeleteRowLocked(h.job_id(), h.name()));
    return absl::DataLossError(absl::StrCat("artifact ", h.name(), ": the ", h.size_bytes(),
                                            " bytes received hash to ", digest, ", not to the header's ", h.sha256(),
                                            "; the partial upload was dropped"));
  }
  TY_RETURN_IF_ERROR(RenameDurably(part, final_path));
  {
    absl::MutexLock lock(&mu_);
    TY_ASSIGN_OR_RETURN(auto stmt, db_->Prepare(
        "UPDATE artifacts SET state = 'complete', create_time = ?3 WHERE job_id = ?1 AND name = ?2"));
    stmt.BindText(1, h.job_id());
    stmt.BindText(2, h.name());
    stmt.BindInt(3, absl::ToUnixMicros(clock_->Now()));
    TY_RETURN_IF_ERROR(stmt.Run());
  }
  v1::Event event;
  event.set_attempt(h.attempt());
  event.set_rank(h.rank());
  v1::ArtifactRef* ref = event.mutable_artifact();
  ref->set_name(h.name());
  ref->set_kind(h.kind());
  ref->set_size_bytes(h.size_bytes());
  ref->set_uri(absl::StrCat("artifact://", h.job_id(), "/", h.name()));
  ref->set_sha256(h.sha256());
  auto appended = manager_->AppendControllerEvent(h.job_id(), std::move(event));
  if (!appended.ok()) {
    // Stored and listed; only the announcement is missing.
    spdlog::error("artifact {}/{} stored, but its event was not: {}", h.job_id(), h.name(),
                  std::string(appended.status().message()));
  } else if (!*appended) {
    spdlog::info("artifact {}/{} stored after the job ended: indexed without an event", h.job_id(), h.name());
  }
  return MakeStatus(h.size_bytes(), true);
}

void ArtifactStore::WarnRefused(const v1::ArtifactHeader& h, int64_t used) {
  {
    absl::MutexLock lock(&mu_);
    if (!warned_.insert(Key(h.job_id(), h.name())).second) return;
  }
  v1::Event event;
  event.set_attempt(h.attempt());
  event.set_rank(-1);
  event.mutable_log()->set_level("warn");
  event.mutable_log()->set_message(absl::StrCat("artifact ", h.name(), " (", h.size_bytes(), " bytes, ", h.kind(),
                                                " from ", h.worker(), ") was refused: the job's artifacts would pass ",
                                                options_.bytes_per_job, " bytes (", used,
                                                " held; --artifact-bytes-per-job)"));
  auto appended = manager_->AppendControllerEvent(h.job_id(), std::move(event));
  if (!appended.ok()) {
    spdlog::warn("artifact {}/{}: the refusal event was not stored: {}", h.job_id(), h.name(),
                 std::string(appended.status().message()));
  }
}

}  // namespace trainyard
