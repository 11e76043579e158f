// What a model module needs to know about the mesh: its coordinates and the groups its
// forward pass talks to. A plain value (group pointers are borrowed from the
// ProcessMesh, which outlives the model); the default is a single rank, where every
// collective is skipped.
#pragma once

namespace trainyard::engine {

class CollectiveGroup;

struct ParallelContext {
  int rank = 0, world = 1;  // flat rank in dp·tp
  int dp_rank = 0, dp = 1;
  int tp_rank = 0, tp = 1;
  int ep_rank = 0, ep = 1;
  // Sharded data parallelism (FSDP, parallelism.dp_shard): dp = replicas · dp_shard, and
  // DP rank d is shard dp_shard_rank = d % dp_shard of replica d / dp_shard. Routed
  // experts are sharded over expert_shard ranks (1: not sharded; process_mesh.h).
  int dp_shard = 1, dp_shard_rank = 0, replica = 0;
  int expert_shard = 1, expert_shard_rank = 0;
  CollectiveGroup* tp_group = nullptr;  // null when tp == 1
  CollectiveGroup* ep_group = nullptr;  // null when ep == 1
};

}  // namespace trainyard::engine
