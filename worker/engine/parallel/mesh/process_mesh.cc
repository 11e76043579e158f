#include "worker/engine/parallel/mesh/process_mesh.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace trainyard::engine {
namespace {

std::vector<int> Ranks(int first, int count, int stride) {
  std::vector<int> r;
  for (int i = 0; i < count; ++i) r.push_back(first + i * stride);
  return r;
}

}  // namespace

std::unique_ptr<ProcessMesh> ProcessMesh::Build(std::unique_ptr<CollectiveGroup> world,
                                                const ParallelismConfig& p) {
  const int n = world->world_size();
  if (n != p.dp * p.tp) {
    throw std::invalid_argument("world size " + std::to_string(n) + " does not match parallelism.dp*tp = " +
                                std::to_string(p.dp * p.tp));
  }
  if (p.ep < 1 || n % p.ep != 0) {
    throw std::invalid_argument("parallelism.ep=" + std::to_string(p.ep) + " must divide dp*tp=" +
                                std::to_string(n));
  }
  const int S = p.dp_shard;
  if (S < 1 || p.dp % S != 0) {
    throw std::invalid_argument("parallelism.dp_shard=" + std::to_string(S) + " must divide dp=" + std::to_string(p.dp));
  }
  std::unique_ptr<ProcessMesh> m(new ProcessMesh());
  const int rank = world->rank();
  ParallelContext& c = m->context_;
  c.rank = rank;
  c.world = n;
  c.dp = p.dp;
  c.tp = p.tp;
  c.ep = p.ep;
  c.dp_rank = rank / p.tp;
  c.tp_rank = rank % p.tp;
  c.ep_rank = rank % p.ep;
  c.dp_shard = S;
  c.dp_shard_rank = c.dp_rank % S;
  c.replica = c.dp_rank / S;
  const int replica_ranks = S * p.tp;
  c.expert_shard = S > 1 && replica_ranks % p.ep == 0 ? replica_ranks / p.ep : 1;
  c.expert_shard_rank = c.expert_shard > 1 ? (rank / p.ep) % c.expert_shard : 0;
  // Every rank walks the same list in the same order and joins the groups it is in.
  for (int d = 0; d < p.dp; ++d) {
    if (d == c.dp_rank) m->tp_ = world->NewSubgroup("tp" + std::to_string(d), Ranks(d * p.tp, p.tp, 1));
  }
  for (int t = 0; t < p.tp; ++t) {
    if (t == c.tp_rank) m->dp_ = world->NewSubgroup("dp" + std::to_string(t), Ranks(t, p.dp, p.tp));
  }
  for (int g = 0; g < n / p.ep; ++g) {
    if (g == rank / p.ep) m->ep_ = world->NewSubgroup("ep" + std::to_string(g), Ranks(g * p.ep, p.ep, 1));
  }
  for (int i = 0; i < p.ep; ++i) {
    if (i == c.ep_rank) {
      m->expert_dp_ = world->NewSubgroup("edp" + std::to_string(i), Ranks(i, n / p.ep, p.ep));
    }
  }
  for (int r = 0; r < p.dp / S; ++r) {
    for (int t = 0; t < p.tp; ++t) {
      if (r == c.replica && t == c.tp_rank) {
        m->fsdp_ = world->NewSubgroup("fsdp" + std::to_string(r * p.tp + t), Ranks(r * replica_ranks + t, S, p.tp));
      }
    }
  }
  if (c.expert_shard > 1) {
    for (int r = 0; r < p.dp / S; ++r) {
      for (int i = 0; i < p.ep; ++i) {
        if (r == c.replica && i == c.ep_rank) {
          m->expert_fsdp_ = world->NewSubgroup("efsdp" + std::to_string(r * p.ep + i),
                                               Ranks(r * replica_ranks + i, c.expert_shard, p.ep));
        }
      }
    }
  } else {
    m->expert_fsdp_ = world->NewSubgroup("efsdp-self" + std::to_string(rank), {rank});
  }
  if (S > 1) {
    const int replicas = p.dp / S;
    for (int s = 0; s < S; ++s) {
      for (int t = 0; t < p.tp; ++t) {
        if (s == c.dp_shard_rank && t == c.tp_rank) {
          m->dp_replicate_ = world->NewSubgroup("dprep" + std::to_string(s * p.tp + t), Ranks(s * p.tp + t, replicas, replica_ranks));
        }
      }
    }
    for (int s = 0; s < S; ++s) {
      if (s == c.dp_shard_rank) {
        std::vector<int> members;
        for (int r = 0; r < replicas; ++r) {
          for (int t = 0; t < p.tp; ++t) members.push_back((r * S + s) * p.tp + t);
        }
        m->router_replicate_ = world->NewSubgroup("rrep" + std::to_string(s), members);
      }
    }
    if (c.expert_shard > 1) {
      for (int i = 0; i < p.ep; ++i) {
        for (int j = 0; j < c.expert_shard; ++j) {
          if (i == c.ep_rank && j == c.expert_shard_rank) {
            m->expert_replicate_ = world->NewSubgroup("erep" + std::to_string(i * c.expert_shard + j),
                                                      Ranks(i + j * p.ep, replicas, replica_ranks));
          }
        }
      }
    }
  }
  c.tp_group = p.tp > 1 ? m->tp_.get() : nullptr;
  c.ep_group = p.ep > 1 ? m->ep_.get() : nullptr;
  m->world_ = std::move(world);
  return m;
}

}  // namespace trainyard::engine
