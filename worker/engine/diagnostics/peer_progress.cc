#include "worker/engine/diagnostics/peer_progress.h"

#include <sstream>

#include "worker/engine/base/torch_compat.h"

namespace trainyard::engine {
namespace {

constexpr const char* kPrefix = "trainyard/flight/";

}  // namespace

struct PeerProgress::Impl {
  compat::StorePtr store;
};

std::string EncodeGroupProgress(const std::vector<flight::GroupSnapshot>& groups) {
  std::string s;
  for (const auto& g : groups) {
    if (!s.empty()) s += ';';
    s += g.name + "=" + std::to_string(g.entered) + "/" + std::to_string(g.completed);
  }
  return s;
}

bool DecodeGroupProgress(const std::string& text, std::vector<flight::GroupSnapshot>* groups) {
  groups->clear();
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ';')) {
    const auto eq = item.find('=');
    const auto slash = item.find('/', eq == std::string::npos ? 0 : eq);
    if (eq == std::string::npos || eq == 0 || slash == std::string::npos) return false;
    flight::GroupSnapshot g;
    g.name = item.substr(0, eq);
    try {
      std::size_t used = 0;
      const std::string entered = item.substr(eq + 1, slash - eq - 1);
      const std::string completed = item.substr(slash + 1);
      g.entered = std::stoull(entered, &used);
      if (used != entered.size()) return false;
      g.completed = std::stoull(completed, &used);
      if (used != completed.size()) return false;
    } catch (const std::exception&) {
      return false;
    }
    groups->push_back(std::move(g));
  }
  return true;
}

PeerProgress::PeerProgress(PeerStoreOptions options) : impl_(std::make_unique<Impl>()), options_(std::move(options)) {}

PeerProgress::~PeerProgress() = default;

bool PeerProgress::Connect(std::string* error) {
  if (impl_->store) return true;
  try {
    impl_->store = compat::MakeTcpStoreClient(options_.master_addr, options_.master_port, options_.timeout);
    return true;
  } catch (const std::exception& e) {
    *error = "TCPStore " + options_.master_addr + ":" + std::to_string(options_.master_port) + ": " + e.what();
    return false;
  }
}

std::string PeerProgress::Publish(const std::vector<flight::GroupSnapshot>& groups) {
  const std::string text = EncodeGroupProgress(groups);
  if (text == last_) return "";
  std::string error;
  if (!Connect(&error)) return error;
  try {
    impl_->store->set(kPrefix + std::to_string(options_.rank), std::vector<uint8_t>(text.begin(), text.end()));
    last_ = text;
    return "";
  } catch (const std::exception& e) {
    impl_->store.reset();  // reconnect next time
    return std::string("TCPStore set: ") + e.what();
  }
}

bool PeerProgress::ReadPeers(const std::vector<int>& ranks, std::vector<flight::RingSnapshot>* out,
                             std::string* error) {
  if (!Connect(error)) return false;
  try {
    for (int r : ranks) {
      const std::string key = kPrefix + std::to_string(r);
      if (!impl_->store->check({key})) continue;
      const std::vector<uint8_t> value = impl_->store->get(key);
      flight::RingSnapshot s;
      s.rank = r;
      s.world_size = options_.world_size;
      s.path = "store:" + key;
      if (!DecodeGroupProgress(std::string(value.begin(), value.end()), &s.groups)) continue;
      out->push_back(std::move(s));
    }
    return true;
  } catch (const std::exception& e) {
    *error = std::string("TCPStore: ") + e.what();
    return false;
  }
}

}  // namespace trainyard::engine
