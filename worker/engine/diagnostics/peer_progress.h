// Collective progress of ranks on other hosts, through rank 0's TCPStore: each rank
// publishes its per-group entered/completed seqs (key "trainyard/flight/RANK", value
// "NAME=ENTERED/COMPLETED;..."), at most about once a second and only when they
// changed, over its own client connection with a short timeout, so the watchdog of a
// rank can name a laggard whose flight ring is not on its host.
//
// Thread contract: Publish from one thread (the publisher thread of the Watchdog);
// ReadPeers from another (the watchdog, once, on a stall); both may block for at most
// the timeout. All failures are reported through the return values, never thrown.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/flight/flight_ring.h"

namespace trainyard::engine {

struct PeerStoreOptions {
  std::string master_addr;
  int master_port = 0;
  int world_size = 1;
  int rank = 0;
  std::chrono::milliseconds timeout{2000};
};

// The text of a rank's groups, and back (pure; tested).
std::string EncodeGroupProgress(const std::vector<flight::GroupSnapshot>& groups);
// False when `text` is malformed.
bool DecodeGroupProgress(const std::string& text, std::vector<flight::GroupSnapshot>* groups);

class PeerProgress {
 public:
  explicit PeerProgress(PeerStoreOptions options);
  ~PeerProgress();

  // Publishes `groups` when they differ from the last published. Returns "" or why
  // not (the store could not be reached).
  std::string Publish(const std::vector<flight::GroupSnapshot>& groups);

  // The published progress of `ranks` as snapshots (rank + groups; ranks that never
  // published are left out). Returns false when the store cannot be reached.
  bool ReadPeers(const std::vector<int>& ranks, std::vector<flight::RingSnapshot>* out, std::string* error);

 private:
  bool Connect(std::string* error);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  PeerStoreOptions options_;
  std::string last_;
};

}  // namespace trainyard::engine
