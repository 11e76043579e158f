#include "worker/engine/checkpoint/checkpoint_writer.h"

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

#include "common/base/text.h"
#include "worker/engine/base/torch_compat.h"
#include "worker/engine/checkpoint/checkpoint_layout.h"
#include "worker/engine/io/safetensors_file.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

}  // namespace

CheckpointWriter::CheckpointWriter(CheckpointWriterOptions options) : options_(std::move(options)) {
  options_.root = fs::absolute(options_.root).lexically_normal().string();
  // A prune cut short by a crash left .deleting-* folders: nothing loads them, and the
  // space is the job's to give back.
  if (options_.rank == 0) {
    for (const std::string& path : FinishInterruptedDeletions(options_.root, nullptr)) {
      if (options_.on_log) options_.on_log("checkpoint deletion finished: " + path);
    }
  }
}

CheckpointWriter::~CheckpointWriter() {
  if (!pending_.valid()) return;
  abandon_ = true;
  try {
    pending_.get();
  } catch (...) {
  }
}

void CheckpointWriter::ThrowIfFailed() {
  if (pending_.valid() && pending_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) pending_.get();
}

void CheckpointWriter::Wait() {
  if (pending_.valid()) pending_.get();
}

void CheckpointWriter::Save(const CheckpointStep& step, const std::vector<StateTensor>& state) {
  const auto start = Clock::now();
  Wait();  // one write in flight per rank
  torch::NoGradGuard no_grad;
  // Metadata first: which global tensor each entry is a slice of, and where it sits.
  nlohmann::json slices = nlohmann::json::object();
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  std::optional<c10::Device> device_copies;
  for (const StateTensor& s : state) {
    if (!s.owned) continue;
    const torch::Tensor& local = s.local;
    if (local.is_cpu()) {
      tensors.emplace_back(s.name, local.detach()
                                       .to(torch::kCPU, local.scalar_type(), /*non_blocking=*/false,
                                           /*copy=*/true)
                                       .contiguous());
    } else {
      // A device tensor goes into page-locked host memory, kept from one save to the
      // next (the previous write is done: Wait above), with an asynchronous copy; one
      // synchronize below ends them all, instead of one blocking copy per tensor.
      torch::Tensor& host = staging_[s.name];
      if (!host.defined() || host.sizes() != local.sizes() || host.scalar_type() != local.scalar_type()) {
        host = torch::empty(local.sizes(), torch::TensorOptions().dtype(local.scalar_type()).pinned_memory(true));
      }
      host.copy_(local.detach(), /*non_blocking=*/true);
      tensors.emplace_back(s.name, host);
      device_copies = local.device();
    }
    slices[s.name] = {{"name", s.name}, {"global_shape", s.global_shape}, {"offsets", s.offsets}};
  }
  if (device_copies) compat::Synchronize(*device_copies);
  nlohmann::json rng = nlohmann::json::array();
  for (auto& [name, value] : compat::RngStates()) {
    tensors.emplace_back("rng." + name, value.contiguous());
    rng.push_back("rng." + name);
  }
  const nlohmann::json meta = {{"format", kCheckpointFormat},
                               {"step", step.step},
                               {"attempt", options_.attempt},
                               {"rank", options_.rank},
                               {"layout", {{"dp", options_.dp}, {"tp", options_.tp}, {"ep", options_.ep}}},
                               {"optimizer_step", step.optimizer_step},
                               {"samples_consumed", step.step * step.global_batch},
                               {"slices", slices},
                               {"rng", rng}};
  const double blocked_ms = MsSince(start);
  pending_ =
      std::async(std::launch::async, [this, step, t = std::move(tensors), m = meta.dump(), blocked_ms]() mutable {
        Write(step, std::move(t), std::move(m), blocked_ms);
      });
}

void CheckpointWriter::Write(const CheckpointStep& step, std::vector<std::pair<std::string, torch::Tensor>> tensors,
                             std::string metadata, double blocked_ms) {
  const auto start = Clock::now();
  const std::string dir = (fs::path(options_.root) / CheckpointDirName(step.step, options_.attempt)).string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("checkpoint " + dir + ": cannot create the directory: " + ec.message());
  if (fs::exists(fs::path(dir) / kManifestName, ec)) {
    throw std::runtime_error("checkpoint " + dir +
                             ": already holds a complete checkpoint of an earlier run with the same attempt; give "
                             "this run another --attempt or --checkpoint-dir");
  }
  SafetensorsWriteOptions write;
  write.metadata["trainyard.checkpoint"] = std::move(metadata);
  const bool hang = step.requested && options_.hang_requested;
  if (options_.pause_at_step == step.step || hang) {
    write.after_first_tensor = [&] {
      if (options_.on_log) {
        const char* what = hang ? "requested checkpoint write hung" : "checkpoint write paused";
        options_.on_log(std::string("test hook: ") + what + " at step " + std::to_string(step.step) + " (rank " +
                        std::to_string(options_.rank) + ", " + dir + ")");
      }
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    };
  }
  WriteSafetensors((fs::path(dir) / RankFileName(options_.rank)).string(), tensors, write);
  tensors.clear();  // the host copy is no longer needed
  if (options_.rank != 0) return;

  // Rank 0: the manifest, only once every rank's file is complete (renamed into place).
  const int world = options_.dp * options_.tp;
  CheckpointManifest m;
  m.step = step.step;
  m.attempt = options_.attempt;
  m.dp = options_.dp;
  m.tp = options_.tp;
  m.ep = options_.ep;
  m.optimizer_step = step.optimizer_step;
  m.global_batch = step.global_batch;
  m.samples_consumed = step.step * step.global_batch;
  m.dataset = step.dataset;
  m.seed = step.seed;
  m.metric = step.metric;
  const auto deadline = start + std::chrono::duration<double>(options_.wait_for_ranks_s);
  for (int r = 0; r < world; ++r) {
    const std::string path = (fs::path(dir) / RankFileName(r)).string();
    for (;;) {
      const auto size = fs::file_size(path, ec);
      if (!ec) {
        m.files.push_back({RankFileName(r), r, static_cast<int64_t>(size)});
        m.total_bytes += static_cast<int64_t>(size);
        break;
      }
      if (abandon_) throw std::runtime_error("checkpoint " + dir + ": abandoned while waiting for " + path);
      if (Clock::now() > deadline) {
        throw std::runtime_error("checkpoint " + dir + ": rank " + std::to_string(r) + "'s file " + RankFileName(r) +
                                 " did not appear within " + std::to_string(options_.wait_for_ranks_s) +
                                 " s; no manifest written");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // The step directory's own entry in root must be durable before the manifest makes
  // it a checkpoint the controller will resume from.
  FsyncDirectory(options_.root, dir);
  const fs::path parent = fs::path(options_.root).lexically_normal().parent_path();
  if (!parent.empty()) FsyncDirectory(parent.string(), dir);  // root itself may be new
  WriteManifestAtomically(dir, m);
  const double write_ms = MsSince(start);
  // Reported before pruning: the controller then knows this checkpoint before any
  // older one it may have recorded is removed.
  if (options_.on_saved) {
    options_.on_saved({step.step, dir, m.total_bytes, blocked_ms, write_ms, options_.dp, options_.tp, options_.ep,
                       step.requested, step.metric});
  }
  const PruneResult pruned = PruneCheckpoints(options_.root, {options_.keep, options_.keep_best, options_.best_metric},
                                              options_.attempt, dir, options_.prune_hook);
  if (options_.on_log) {
    for (const std::string& path : pruned.finished) options_.on_log("checkpoint deletion finished: " + path);
    for (const RemovedCheckpoint& r : pruned.removed) options_.on_log("checkpoint pruned: " + r.path);
    for (const std::string& failure : pruned.failures) options_.on_log("checkpoint pruning left " + Quote(failure));
  }
  if (options_.on_pruned) options_.on_pruned(step.step, pruned);
}

}  // namespace trainyard::engine
