// The guards of one compiled entry: for every tensor (inputs, then params) its sizes,
// dtype, device and requires_grad, plus the global grad mode. The structural key is
// guarded by construction: an entry lives only in the RegionCache of its key. Sizes
// declared dynamic (input, dim) are not guarded; their number of dims still is.
// Immutable after Capture(); thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace trainyard::engine::compile {

// (input index, dimension) pairs whose size an entry does not guard.
using DynamicDims = std::vector<std::pair<int, int>>;

class GuardSet {
 public:
  // The guards that `inputs`/`params` pass right now. Every tensor must be defined;
  // every dynamic dim must name an existing input dimension (std::invalid_argument).
  static GuardSet Capture(const std::vector<torch::Tensor>& inputs,
                          const std::vector<torch::Tensor>& params, bool grad_mode,
                          const DynamicDims& dynamic = {});

  // The guarded properties of one call's tensors, each read at most once however many
  // entries are checked, and only when some entry gets as far as that tensor. No heap
  // allocation for up to 16 tensors. Valid while the tensors are alive and not resized.
  class Observation {
   public:
    Observation(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& params,
                bool grad_mode);

   private:
    friend class GuardSet;
    struct Seen {
      c10::IntArrayRef sizes;
      c10::ScalarType dtype = c10::ScalarType::Undefined;
      c10::Device device = c10::Device(c10::DeviceType::CPU);
      bool requires_grad = false;
      bool defined = false;
    };
    const Seen& At(size_t i) const {
      while (read_ <= i) Read(read_++);
      return seen_[i];
    }
    void Read(size_t i) const;

    const std::vector<torch::Tensor>& inputs_;
    const std::vector<torch::Tensor>& params_;
    bool grad_mode_;
    mutable c10::SmallVector<Seen, 16> seen_;  // inputs, then params
    mutable size_t read_ = 0;
  };

  // Hot path, once per cached entry on every region call: no allocation, stops at the
  // first mismatch.
  bool Matches(const Observation& call) const;
  bool Matches(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& params,
               bool grad_mode) const {
    return Matches(Observation(inputs, params, grad_mode));
  }

  // The first failing guard in words, e.g. "input[0].size(0): expected 4096, got 4160",
  // or nullopt if all pass. Order: input count, param count, grad_mode, then per tensor
  // (inputs first) dim, each size, dtype, device, requires_grad.
  std::optional<std::string> Check(const std::vector<torch::Tensor>& inputs,
                                   const std::vector<torch::Tensor>& params, bool grad_mode) const;

  // Every failing guard in words (a count mismatch is one failure and stops there; a
  // dim mismatch is one failure for that tensor). Used to find the closest entry.
  std::vector<std::string> Failures(const std::vector<torch::Tensor>& inputs,
                                    const std::vector<torch::Tensor>& params, bool grad_mode) const;

  // "grad_mode=true input[0]=Float[?, 16] cpu requires_grad ...": what an entry was
  // compiled for, for COMPILE events ("?" is a dynamic size).
  std::string ToString() const;

 private:
  static constexpr int64_t kDynamic = -1;
  struct TensorGuard {
    c10::SmallVector<int64_t, 5> sizes;  // kDynamic where not guarded
    bool has_dynamic = false;
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    c10::Device device = c10::Device(c10::DeviceType::CPU);
    bool requires_grad = false;
  };

  static bool TensorMatches(const TensorGuard& g, const Observation::Seen& t);
  // Appends the failures of one tensor; stops after the first when `first_only`.
  static void TensorFailures(const TensorGuard& g, const torch::Tensor& t, const std::string& label,
                             bool first_only, std::vector<std::string>& out);
  std::vector<std::string> Collect(const std::vector<torch::Tensor>& inputs,
                                   const std::vector<torch::Tensor>& params, bool grad_mode,
                                   bool first_only) const;

  std::vector<TensorGuard> tensors_;  // inputs, then params
  size_t n_inputs_ = 0;
  bool grad_mode_ = true;
};

}  // namespace trainyard::engine::compile
