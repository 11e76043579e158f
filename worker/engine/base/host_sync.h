// The places where the training step waits on the host for values a device computed
// (on CUDA each is a stream synchronisation; torchtitan's step has the same few): the MoE
// dispatch's per-expert token counts (its one declared graph break per MoE layer), the
// gradient norm for the clip, the step's loss and flags, the expert load metrics. Each is
// a HostRead scope, counted per site, so a step's host syncs are a figure
// (trainyard-bench prints them) and a new one is a test failure: UndeclaredHostReads
// watches every operator LibTorch runs and counts those that read device data on the
// host outside a scope (.item(), data-dependent shapes such as nonzero, a copy from a
// device to the host).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace trainyard::engine {

// One declared host read, for the lifetime of the object (it may read several tensors).
class HostRead {
 public:
  explicit HostRead(const char* site);
  ~HostRead();
  HostRead(const HostRead&) = delete;
  HostRead& operator=(const HostRead&) = delete;

  // True on a thread inside a HostRead.
  static bool Inside();
};

// HostRead scopes entered since the process started, by site.
std::map<std::string, int64_t> HostReadsBySite();

// Counts, while it lives, the operators that read device data on the host outside any
// HostRead scope, on every thread: aten::_local_scalar_dense (.item()), the ops whose
// output shape depends on values (nonzero, masked_select, unique, ...), equal, and copies from a non-CPU tensor to a
// CPU one. On a CPU-only process the last never fires (there is no device), and a raw data_ptr read is invisible to it;
// the rest are caught on any device. Not nestable (one per process at a time).
class UndeclaredHostReads {
 public:
  UndeclaredHostReads();
  ~UndeclaredHostReads();
  UndeclaredHostReads(const UndeclaredHostReads&) = delete;
  UndeclaredHostReads& operator=(const UndeclaredHostReads&) = delete;

  // Operator name -> calls outside a HostRead so far.
  std::map<std::string, int64_t> Counts() const;

 private:
  uint64_t handle_ = 0;
};

}  // namespace trainyard::engine
