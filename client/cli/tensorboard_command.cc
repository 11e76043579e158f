#include "client/cli/tensorboard_command.h"

#include <stdlib.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/cli_format.h"
#include "common/base/text.h"
#include "common/tensorboard/job_run_writer.h"

namespace trainyard::cli {

namespace fs = std::filesystem;

namespace {

// Buffered records are written out every this many events: memory stays bounded
// whatever the job's length.
constexpr int kFlushEvery = 10000;

// A hidden folder under `dir`, removed with what it holds when this goes.
class StagingDir {
 public:
  static absl::StatusOr<StagingDir> Make(const std::string& dir) {
    std::string tmpl = (fs::path(dir) / ".trainyard-tensorboard-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("cannot create a folder in ", Quoted(dir), ": ", std::strerror(errno)));
    }
    return StagingDir(tmpl);
  }
  StagingDir(StagingDir&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  StagingDir(const StagingDir&) = delete;
  ~StagingDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  explicit StagingDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

struct Written {
  std::map<int, std::string> runs;  // by attempt, under the final folder
  int64_t records = 0;
  int64_t events = 0;
};

absl::StatusOr<Written> WriteJob(const v1::Job& job, const TensorBoardCommandOptions& options, JobClient* client) {
  const std::string final_dir = (fs::path(options.output_dir) / job.id()).string();
  absl::StatusOr<StagingDir> staging = StagingDir::Make(options.output_dir);
  if (!staging.ok()) return staging.status();
  tensorboard::JobRunWriterOptions wo;
  wo.root = staging->path();
  wo.host = options.host;
  absl::StatusOr<std::unique_ptr<tensorboard::JobRunWriter>> writer =
      tensorboard::JobRunWriter::Open(wo, job.id(), job.spec());
  if (!writer.ok()) return writer.status();
  Written w;
  absl::Status flushed;
  if (job.last_seq() > 0) {
    absl::Status watched = client->Watch(job.id(), 1, [&](const v1::Event& e) {
      (*writer)->Add(e);
      ++w.events;
      if (w.events % kFlushEvery == 0) {
        flushed = (*writer)->Flush();
        if (!flushed.ok()) return false;
      }
      return e.seq() < job.last_seq();
    });
    if (!flushed.ok()) return flushed;
    if (!watched.ok()) return watched;
  }
  if (absl::Status s = (*writer)->Flush(); !s.ok()) return s;
  w.records = (*writer)->records_written();
  const std::map<int, std::string> staged = (*writer)->run_dirs();
  if (staged.empty()) return w;  // no attempt ran: nothing to show, no folder
  std::error_code ec;
  if (fs::exists(final_dir, ec) || fs::is_symlink(final_dir, ec)) {
    return absl::AlreadyExistsError(absl::StrCat(Quoted(final_dir), " appeared while it was written; left as it is"));
  }
  fs::rename(fs::path(staging->path()) / job.id(), final_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot move the runs to ", Quoted(final_dir), ": ", ec.message()));
  for (const auto& [attempt, dir] : staged) {
    w.runs[attempt] = (fs::path(final_dir) / fs::path(dir).filename()).string();
  }
  return w;
}

}  // namespace

int RunTensorBoardCommand(const TensorBoardCommandOptions& options, JobClient* client, std::ostream& out,
                          std::ostream& err) {
  auto fail = [&](const absl::Status& status) {
    err << FormatError(status) << std::endl;
    return ExitCodeForStatus(status);
  };
  if (options.job_ids.empty()) return fail(absl::InvalidArgumentError("give at least one job id"));
  if (absl::Status ok = tensorboard::PrepareOutputDir(options.output_dir, "-o"); !ok.ok()) {
    return fail(absl::InvalidArgumentError(ok.message()));
  }
  // Every job first: a typo in the third id writes nothing at all.
  std::vector<v1::Job> jobs;
  for (const std::string& id : options.job_ids) {
    absl::StatusOr<v1::Job> job = client->GetJob(id);
    if (!job.ok()) return fail(job.status());
    if (job->has_compacted()) {
      return fail(absl::FailedPreconditionError(absl::StrCat(
          "job ", Quoted(job->id()), "'s events were compacted (--retain-finished): nothing left to write")));
    }
    for (const v1::Job& seen : jobs) {
      if (seen.id() == job->id()) {
        return fail(absl::InvalidArgumentError(absl::StrCat("job ", Quoted(id), " is named twice")));
      }
    }
    const std::string dir = (fs::path(options.output_dir) / job->id()).string();
    std::error_code ec;
    if (fs::exists(dir, ec) || fs::is_symlink(dir, ec)) {
      return fail(absl::AlreadyExistsError(absl::StrCat(
          Quoted(dir), " already exists: TensorBoard would show its runs twice; remove it or choose another -o")));
    }
    jobs.push_back(*std::move(job));
  }
  for (const v1::Job& job : jobs) {
    absl::StatusOr<Written> w = WriteJob(job, options, client);
    if (!w.ok()) {
      return fail(absl::Status(w.status().code(), absl::StrCat(job.id(), ": ", w.status().message())));
    }
    if (options.json) {
      nlohmann::ordered_json runs = nlohmann::ordered_json::array();
      for (const auto& [attempt, dir] : w->runs) runs.push_back({{"attempt", attempt}, {"dir", dir}});
      out << nlohmann::ordered_json{{"job_id", job.id()}, {"events", w->events}, {"records", w->records}, {"runs", runs}}
                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
          << std::endl;
    } else if (w->runs.empty()) {
      out << TerminalSafe(absl::StrCat(job.id(), ": no attempt ran, nothing written"), false) << std::endl;
    } else {
      std::vector<std::string> dirs;
      for (const auto& [attempt, dir] : w->runs) dirs.push_back(dir);
      out << TerminalSafe(absl::StrCat(job.id(), ": ", Counted(static_cast<int64_t>(w->runs.size()), "run"), ", ",
                                       Counted(w->records, "record"), ": ", absl::StrJoin(dirs, " ")),
                          false)
          << std::endl;
    }
  }
  return kExitOk;
}

}  // namespace trainyard::cli
