#include "server/tensorboard/tensorboard_exporter.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace trainyard {

namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<TensorBoardExporter>> TensorBoardExporter::Create(
    TensorBoardExporterOptions options, JobStore* store, SpecLookup lookup, prometheus::Registry& registry,
    Clock* clock) {
  TY_RETURN_IF_ERROR(tensorboard::PrepareOutputDir(options.dir, "--tensorboard-dir"));
  return std::unique_ptr<TensorBoardExporter>(
      new TensorBoardExporter(std::move(options), store, std::move(lookup), registry, clock));
}

TensorBoardExporter::~TensorBoardExporter() { Stop(); }

void TensorBoardExporter::Start(const std::vector<std::string>& jobs) {
  std::vector<std::string> all = jobs;
  std::error_code ec;
  // Jobs whose last events may not have been written before a crash or a stop.
  for (fs::directory_iterator it(options_.dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (fs::exists(it->path() / tensorboard::kProgressFile)) all.push_back(it->path().filename().string());
  }
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& id : all) queued_.insert(id);
    metrics_.SetQueueDepth(static_cast<int64_t>(queued_.size()));
  }
  thread_ = std::thread([this] { Run(); });
}

void TensorBoardExporter::OnCommitted(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  if (queued_.count(job_id) > 0) return;
  if (static_cast<int>(queued_.size()) >= options_.max_queued_jobs) {
    metrics_.QueueOverflow();
    return;
  }
  queued_.insert(job_id);
  metrics_.SetQueueDepth(static_cast<int64_t>(queued_.size()));
}

void TensorBoardExporter::Flush() {
  absl::MutexLock lock(&mu_);
  if (!thread_.joinable() || stopping_) return;
  const uint64_t after = rounds_started_;
  hurry_ = true;
  // A round that started before the call may have missed what was queued just before it.
  auto done = [this, after]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return rounds_done_ > after || stopping_; };
  mu_.Await(absl::Condition(&done));
}

void TensorBoardExporter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void TensorBoardExporter::Run() {
  while (true) {
    std::set<std::string> jobs;
    bool last = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || hurry_; };
      clock_->AwaitWithDeadline(&mu_, absl::Condition(&ready), clock_->Now() + options_.flush_period);
      last = stopping_;
      hurry_ = false;
      ++rounds_started_;
      jobs.swap(queued_);
      metrics_.SetQueueDepth(0);
    }
    for (const std::string& id : jobs) {
      absl::Status status = WriteJob(id);
      if (status.ok()) {
        last_error_.erase(id);
        continue;
      }
      metrics_.WriteError();
      writers_.erase(id);  // reopened from its durable progress next time
      std::string& seen = last_error_[id];
      if (seen != status.message()) {
        seen = std::string(status.message());
        spdlog::error("--tensorboard-dir: {}: {} (retried every {})", id, seen,
                      absl::FormatDuration(options_.flush_period));
      }
      if (!absl::IsNotFound(status)) OnCommitted(id);  // try again next round
    }
    absl::MutexLock lock(&mu_);
    ++rounds_done_;
    if (last) return;
  }
}

absl::Status TensorBoardExporter::WriteJob(const std::string& job_id) {
  auto it = writers_.find(job_id);
  if (it == writers_.end()) {
    TY_ASSIGN_OR_RETURN(v1::JobSpec spec, lookup_(job_id));
    tensorboard::JobRunWriterOptions o;
    o.root = options_.dir;
    o.host = options_.host;
    o.keep_progress = true;
    TY_ASSIGN_OR_RETURN(std::unique_ptr<tensorboard::JobRunWriter> writer,
                        tensorboard::JobRunWriter::Open(o, job_id, spec));
    it = writers_.emplace(job_id, std::move(writer)).first;
  }
  tensorboard::JobRunWriter& w = *it->second;
  bool ended = false;
  while (true) {
    TY_ASSIGN_OR_RETURN(std::vector<v1::Event> events,
                        store_->ReadEvents(job_id, w.last_seq() + 1, options_.read_batch));
    metrics_.EventsRead(static_cast<int64_t>(events.size()));
    for (const v1::Event& e : events) {
      w.Add(e);
      if (e.has_job_state()) {
        const v1::Job::State s = e.job_state().state();
        ended = s == v1::Job::SUCCEEDED || s == v1::Job::FAILED || s == v1::Job::CANCELLED;
      }
    }
    const int64_t before = w.records_written();
    TY_RETURN_IF_ERROR(w.Flush());
    metrics_.RecordsWritten(w.records_written() - before);
    if (static_cast<int>(events.size()) < options_.read_batch) break;
  }
  // An ended job's files are complete; a late event (a rank's exit) reopens them.
  if (ended) writers_.erase(job_id);
  return absl::OkStatus();
}

}  // namespace trainyard
