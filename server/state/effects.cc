#include "server/state/effects.h"

#include <algorithm>
#include <utility>

namespace trainyard {

void Effects::PutJob(const v1::Job& job) {
  Write w;
  w.job_id = job.id();
  w.job = job;
  writes_.push_back(std::move(w));
}

void Effects::AppendEvent(const std::string& job_id, v1::Event event) {
  if (writes_.empty() || writes_.back().job.has_value() || writes_.back().job_id != job_id) {
    Write w;
    w.job_id = job_id;
    writes_.push_back(std::move(w));
  }
  writes_.back().events.push_back(std::move(event));
}

void Effects::Send(const std::shared_ptr<WorkerChannel>& channel,
                   v1::ControllerMessage message) {
  if (channel == nullptr) return;
  outbound_.push_back(Outbound{channel, std::move(message), {}});
}

void Effects::Close(const std::shared_ptr<WorkerChannel>& channel, const std::string& reason) {
  if (channel == nullptr) return;
  outbound_.push_back(Outbound{channel, std::nullopt, reason});
}

void Effects::Notify(const std::string& job_id) {
  if (std::find(notified_.begin(), notified_.end(), job_id) == notified_.end()) {
    notified_.push_back(job_id);
  }
}

void Effects::Settle(const std::string& job_id) {
  if (std::find(settled_.begin(), settled_.end(), job_id) == settled_.end()) {
    settled_.push_back(job_id);
  }
}

}  // namespace trainyard
