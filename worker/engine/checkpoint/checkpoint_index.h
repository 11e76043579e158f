// The slice index of one checkpoint directory, without torch (the `trainyard export` CLI
// and the engine's resharding loader share it): the verified manifest, every rank file's
// header and its `trainyard.checkpoint` metadata checked against the manifest, and for
// each global tensor name the slices that hold parts of it (where in the global tensor,
// where in which file). No tensor data is read. Free functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "worker/engine/checkpoint/checkpoint_layout.h"
#include "worker/engine/io/safetensors_header.h"

namespace trainyard::engine {

// One rank file's part of one global tensor: a hyper-rectangle of the global tensor,
// stored contiguously (row-major) in its file.
struct CheckpointSlice {
  int file = 0;     // index into CheckpointIndex::files (its rank)
  std::string key;  // the tensor's key in that file
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape, offsets, global_shape;
  std::uint64_t data_begin = 0;  // absolute byte offset of the slice's data in its file
  std::uint64_t bytes = 0;
};

struct CheckpointRankFile {
  std::string path;
  int rank = 0;
  std::uint64_t file_bytes = 0;
  std::vector<std::string> rng;  // keys of its RNG state tensors (no slice metadata)
};

struct CheckpointIndex {
  std::string dir;
  CheckpointManifest manifest;
  std::vector<CheckpointRankFile> files;  // rank order
  // Global names in the order the writer laid them out: first appearance over the
  // files in rank order, each file in data-offset order (parameters, optim.m.*,
  // optim.v.*, buffers: CollectTrainState's order).
  std::vector<std::string> names;
  std::map<std::string, std::vector<CheckpointSlice>> slices;  // global name -> its slices
};

// Reads and checks `dir` (ReadVerifiedManifest, then each rank file's header: metadata
// present, format, step/attempt/rank/layout/optimizer step equal to the manifest's,
// every tensor but the RNG states has slice metadata whose offsets + shape lie inside
// its global shape). Throws std::runtime_error("checkpoint PATH: PROBLEM") naming the
// file and the tensor.
CheckpointIndex ReadCheckpointIndex(const std::string& dir);

// Checks that the slices of `name` agree (one dtype, one global shape) and tile its
// global tensor exactly: no two overlap and their elements add up to the whole. Throws
// naming `where`, the tensor and the files.
void CheckExactCover(const std::string& where, const std::string& name, const std::vector<CheckpointSlice>& slices,
                     const CheckpointIndex& index);

// "[4, 32, 64]": a shape or offsets as every checkpoint message writes them.
std::string ShapeText(const std::vector<int64_t>& v);

// Elements of a shape (1 for a scalar's empty shape).
int64_t NumElements(const std::vector<int64_t>& shape);

}  // namespace trainyard::engine
