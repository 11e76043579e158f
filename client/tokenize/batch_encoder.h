// How a tokenize run hands its segments to a tokenizer: tokenize_job.cc gathers
// segments in input order into a batch, one BatchEncoder per tokenizer (spm_job.h,
// hf_job.h) fills in their ids on the run's threads, and the job writes them in order.
#pragma once

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "client/tokenize/segment_reader.h"

namespace trainyard::tokenize {

// A segment of an input waiting for its ids.
struct PendingSegment {
  std::string path;
  Segment segment;
  std::vector<int> ids;
  // Why the segment could not be encoded, naming its byte ("cannot encode the segment
  // at byte N: ..."); empty when it was.
  std::string error;
};

// Not thread-safe; owned by the run, which calls it from the thread that drives it.
class BatchEncoder {
 public:
  virtual ~BatchEncoder() = default;
  // Fills in ids (or error) of every segment of *batch, a run of segments in input order
  // that continues the previous batch.
  virtual void Encode(std::vector<PendingSegment>* batch) = 0;
};

// Runs work(t) for t in [0, threads): t = 0 on the calling thread, the others on threads
// of their own; returns when all are done.
template <typename Work>
void RunOnThreads(int threads, const Work& work) {
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& t : pool) t.join();
}

}  // namespace trainyard::tokenize
