#include "common/tensorboard/job_run_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/base/text.h"
#include "common/tensorboard/tfrecord.h"

namespace trainyard::tensorboard {

namespace fs = std::filesystem;

namespace {

// A job id becomes a folder name: never a path of its own.
bool IsSafeName(const std::string& name) {
  if (name.empty() || name.size() > 128 || name == "." || name == "..") return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", Quoted(path), ": ", std::strerror(errno)));
}

// Writes `data` at `offset` of `path` and cuts the file there: whatever a crashed
// writer left past the recorded length is replaced. On failure the file is cut back
// to `offset`.
absl::Status WriteAt(const std::string& path, int64_t offset, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return Errno("cannot open", path);
  std::size_t done = 0;
  absl::Status status;
  while (done < data.size()) {
    const ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done, offset + static_cast<int64_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      status = Errno("cannot write", path);
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  const int64_t end = status.ok() ? offset + static_cast<int64_t>(data.size()) : offset;
  if (::ftruncate(fd, end) != 0 && status.ok()) status = Errno("cannot truncate", path);
  if (status.ok() && ::fsync(fd) != 0) status = Errno("cannot fsync", path);
  if (!status.ok()) (void)!::ftruncate(fd, offset);
  ::close(fd);
  return status;
}

}  // namespace

absl::Status PrepareOutputDir(const std::string& dir, const std::string& flag) {
  if (dir.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": empty path"));
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st) && !fs::is_directory(st)) {
    return absl::FailedPreconditionError(absl::StrCat(flag, " ", Quoted(dir), ": not a directory"));
  }
  if (!fs::exists(st)) {
    if (absl::Status made = MakeDirectories(dir); !made.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(flag, " ", Quoted(dir), ": ", made.message()));
    }
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, " ", Quoted(dir), ": cannot write there: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<JobRunWriter>> JobRunWriter::Open(const JobRunWriterOptions& options,
                                                                 const std::string& job_id,
                                                                 const v1::JobSpec& spec) {
  if (!IsSafeName(job_id)) {
    return absl::InvalidArgumentError(absl::StrCat("job id ", Quoted(job_id), " cannot name a run folder"));
  }
  std::unique_ptr<JobRunWriter> w(new JobRunWriter(options, job_id, spec));
  if (w->options_.host.empty() || !IsSafeName(w->options_.host)) w->options_.host = "localhost";
  std::error_code ec;
  if (options.keep_progress) {
    TY_RETURN_IF_ERROR(w->LoadProgress());
  } else if (fs::exists(w->JobDir(), ec) || fs::is_symlink(w->JobDir(), ec)) {
    return absl::AlreadyExistsError(absl::StrCat(
        Quoted(w->JobDir()), " already exists: TensorBoard would show its runs twice; remove it or choose another folder"));
  }
  return w;
}

std::string JobRunWriter::JobDir() const { return (fs::path(options_.root) / job_id_).string(); }

std::string JobRunWriter::AttemptDir(int attempt) const {
  return (fs::path(JobDir()) / absl::StrCat("attempt-", attempt)).string();
}

void JobRunWriter::Append(Attempt* a, const Event& record) {
  AppendRecord(record.SerializeAsString(), &a->pending);
  ++a->pending_records;
}

bool JobRunWriter::Add(const v1::Event& event) {
  if (event.seq() <= taken_seq_) return false;
  taken_seq_ = event.seq();
  if (event.attempt() < 1) return false;
  auto [it, inserted] = attempts_.try_emplace(event.attempt());
  Attempt& a = it->second;
  const double wall = static_cast<double>(event.time().seconds()) + event.time().nanos() / 1e9;
  if (inserted) {
    a.file = absl::StrCat("events.out.tfevents.", event.time().seconds(), ".", options_.host, ".trainyard");
    Append(&a, FileVersionEvent(wall));
    Append(&a, SpecTextEvent(spec_, wall));
  }
  for (const Event& record : Summarize(event, &a.counters)) Append(&a, record);
  return true;
}

int64_t JobRunWriter::pending_records() const {
  int64_t n = 0;
  for (const auto& [attempt, a] : attempts_) n += a.pending_records;
  return n;
}

std::map<int, std::string> JobRunWriter::run_dirs() const {
  std::map<int, std::string> out;
  for (const auto& [attempt, a] : attempts_) out[attempt] = AttemptDir(attempt);
  return out;
}

absl::Status JobRunWriter::Flush() {
  int64_t written = 0;
  for (auto& [attempt, a] : attempts_) {
    if (a.pending.empty()) continue;
    const std::string dir = AttemptDir(attempt);
    TY_RETURN_IF_ERROR(MakeDirectories(dir));
    TY_RETURN_IF_ERROR(WriteAt((fs::path(dir) / a.file).string(), a.bytes, a.pending));
    a.bytes += static_cast<int64_t>(a.pending.size());
    written += a.pending_records;
    a.pending.clear();
    a.pending_records = 0;
  }
  const bool moved = taken_seq_ != last_seq_;
  last_seq_ = taken_seq_;
  records_written_ += written;
  // A job with no attempt yet (PENDING, or cancelled before it ran) gets no folder: its
  // events are read again from seq 1 next time, which costs a few job states.
  if (options_.keep_progress && !attempts_.empty() && (moved || written > 0)) TY_RETURN_IF_ERROR(SaveProgress());
  return absl::OkStatus();
}

absl::Status JobRunWriter::SaveProgress() const {
  nlohmann::json attempts = nlohmann::json::object();
  for (const auto& [attempt, a] : attempts_) {
    attempts[std::to_string(attempt)] = {{"file", a.file},
                                         {"bytes", a.bytes},
                                         {"last_step", a.counters.last_step},
                                         {"compiles", a.counters.compiles},
                                         {"recompiles", a.counters.recompiles},
                                         {"graph_breaks", a.counters.graph_breaks},
                                         {"stalls", a.counters.stalls}};
  }
  const nlohmann::json j = {{"version", 1}, {"job", job_id_}, {"last_seq", last_seq_}, {"attempts", attempts}};
  TY_RETURN_IF_ERROR(MakeDirectories(JobDir()));
  return WriteFileAtomically((fs::path(JobDir()) / kProgressFile).string(), j.dump() + "\n");
}

absl::Status JobRunWriter::LoadProgress() {
  const std::string path = (fs::path(JobDir()) / kProgressFile).string();
  absl::StatusOr<std::string> text = ReadFile(path, 1 << 20);
  if (absl::IsNotFound(text.status())) return absl::OkStatus();  // nothing written yet
  if (!text.ok()) return absl::Status(text.status().code(), absl::StrCat(Quoted(path), ": ", text.status().message()));
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(
        absl::StrCat(Quoted(path), ": ", why, "; remove ", Quoted(JobDir()), " to rewrite the job's runs"));
  };
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  try {
    if (j.at("version").get<int>() != 1) return bad("unknown version");
    if (j.at("job").get<std::string>() != job_id_) return bad("written for another job");
    last_seq_ = taken_seq_ = j.at("last_seq").get<int64_t>();
    if (last_seq_ < 0) return bad("negative last_seq");
    for (const auto& [key, v] : j.at("attempts").items()) {
      std::size_t used = 0;
      const int attempt = std::stoi(key, &used);
      if (used != key.size() || attempt < 1) return bad(absl::StrCat("attempt ", Quoted(key)));
      Attempt a;
      a.file = v.at("file").get<std::string>();
      a.bytes = v.at("bytes").get<int64_t>();
      a.counters.last_step = v.at("last_step").get<int64_t>();
      a.counters.compiles = v.at("compiles").get<int64_t>();
      a.counters.recompiles = v.at("recompiles").get<int64_t>();
      a.counters.graph_breaks = v.at("graph_breaks").get<int64_t>();
      a.counters.stalls = v.at("stalls").get<int64_t>();
      if (!IsSafeName(a.file) || a.bytes < 0) return bad(absl::StrCat("attempt ", attempt, ": bad file or length"));
      const std::string file = (fs::path(AttemptDir(attempt)) / a.file).string();
      std::error_code ec;
      const auto size = fs::file_size(file, ec);
      if (ec || static_cast<int64_t>(size) < a.bytes) {
        return bad(absl::StrCat(Quoted(file), " holds ", ec ? 0 : static_cast<int64_t>(size), " bytes, ", a.bytes,
                                " were written"));
      }
      // Records past the recorded length were written but not recorded: they are
      // written again from the store.
      if (static_cast<int64_t>(size) > a.bytes) fs::resize_file(file, a.bytes, ec);
      if (ec) return absl::InternalError(absl::StrCat("cannot truncate ", Quoted(file), ": ", ec.message()));
      attempts_.emplace(attempt, std::move(a));
    }
  } catch (const std::exception& e) {
    return bad(std::string("malformed: ") + e.what());
  }
  return absl::OkStatus();
}

}  // namespace trainyard::tensorboard
