#include "tests/worker/engine/trainer_harness.h"

#include "worker/engine/parallel/mesh/collective_group.h"

namespace trainyard::engine::testing {
namespace {

std::unique_ptr<ProcessMesh> WorldOfOne(const EngineConfig& config) {
  RendezvousOptions one;  // rank 0 of 1: Connect needs no store and no peers
  return ProcessMesh::Build(CollectiveGroup::Connect(one), config.parallelism);
}

TrainerOptions OneThread() {
  TrainerOptions options;
  options.threads = 1;
  return options;
}

}  // namespace

OneRankTrainer::OneRankTrainer(const EngineConfig& config)
    : mesh_(WorldOfOne(config)), events_(out_), trainer_(config, *mesh_, events_, OneThread()) {}

}  // namespace trainyard::engine::testing
