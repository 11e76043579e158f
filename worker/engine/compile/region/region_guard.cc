#include "worker/engine/compile/region/region_guard.h"

#include <stdexcept>

namespace trainyard::engine::compile {
namespace {

const char* Bool(bool b) { return b ? "true" : "false"; }

std::string Expected(const std::string& what, const std::string& expected, const std::string& got) {
  return what + ": expected " + expected + ", got " + got;
}

}  // namespace

GuardSet GuardSet::Capture(const std::vector<torch::Tensor>& inputs,
                           const std::vector<torch::Tensor>& params, bool grad_mode,
                           const DynamicDims& dynamic) {
  GuardSet g;
  g.n_inputs_ = inputs.size();
  g.grad_mode_ = grad_mode;
  g.tensors_.reserve(inputs.size() + params.size());
  for (size_t i = 0; i < inputs.size() + params.size(); ++i) {
    const torch::Tensor& t = i < inputs.size() ? inputs[i] : params[i - inputs.size()];
    if (!t.defined()) {
      throw std::invalid_argument("guard capture: " +
                                  (i < inputs.size() ? "input[" + std::to_string(i)
                                                     : "param[" + std::to_string(i - inputs.size())) +
                                  "] is undefined");
    }
    TensorGuard tg;
    tg.sizes.assign(t.sizes().begin(), t.sizes().end());
    tg.dtype = t.scalar_type();
    tg.device = t.device();
    tg.requires_grad = t.requires_grad();
    g.tensors_.push_back(std::move(tg));
  }
  for (const auto& [input, dim] : dynamic) {
    if (input < 0 || static_cast<size_t>(input) >= inputs.size() || dim < 0 ||
        dim >= inputs[input].dim()) {
      throw std::invalid_argument("guard capture: dynamic dim (" + std::to_string(input) + ", " +
                                  std::to_string(dim) + ") is not a dimension of an input");
    }
    g.tensors_[input].sizes[dim] = kDynamic;
    g.tensors_[input].has_dynamic = true;
  }
  return g;
}

GuardSet::Observation::Observation(const std::vector<torch::Tensor>& inputs,
                                   const std::vector<torch::Tensor>& params, bool grad_mode)
    : inputs_(inputs), params_(params), grad_mode_(grad_mode) {
  seen_.resize(inputs.size() + params.size());
}

void GuardSet::Observation::Read(size_t i) const {
  const torch::Tensor& t = i < inputs_.size() ? inputs_[i] : params_[i - inputs_.size()];
  if (t.defined()) seen_[i] = {t.sizes(), t.scalar_type(), t.device(), t.requires_grad(), true};
}

bool GuardSet::TensorMatches(const TensorGuard& g, const Observation::Seen& t) {
  if (!t.defined) return false;
  // Sizes first: across the entries of one key they are what usually differs. A plain
  // loop: for 2-3 dims, std::equal's memcmp call costs more than the comparison.
  const size_t ndim = g.sizes.size();
  if (t.sizes.size() != ndim) return false;
  const int64_t* want = g.sizes.data();
  const int64_t* got = t.sizes.data();
  if (!g.has_dynamic) {
    for (size_t d = 0; d < ndim; ++d) {
      if (want[d] != got[d]) return false;
    }
  } else {
    for (size_t d = 0; d < ndim; ++d) {
      if (want[d] != kDynamic && want[d] != got[d]) return false;
    }
  }
  return t.dtype == g.dtype && t.device == g.device && t.requires_grad == g.requires_grad;
}

bool GuardSet::Matches(const Observation& call) const {
  if (call.inputs_.size() != n_inputs_ || call.seen_.size() != tensors_.size() || call.grad_mode_ != grad_mode_) {
    return false;
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!TensorMatches(tensors_[i], call.At(i))) return false;
  }
  return true;
}

void GuardSet::TensorFailures(const TensorGuard& g, const torch::Tensor& t, const std::string& label,
                              bool first_only, std::vector<std::string>& out) {
  if (!t.defined()) {
    out.push_back(label + ": expected a defined tensor, got an undefined one");
    return;
  }
  const auto sizes = t.sizes();
  if (sizes.size() != g.sizes.size()) {
    out.push_back(Expected(label + ".dim()", std::to_string(g.sizes.size()), std::to_string(sizes.size())));
    if (first_only) return;
  } else {
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (g.sizes[d] == kDynamic || sizes[d] == g.sizes[d]) continue;
      out.push_back(Expected(label + ".size(" + std::to_string(d) + ")", std::to_string(g.sizes[d]),
                             std::to_string(sizes[d])));
      if (first_only) return;
    }
  }
  if (t.scalar_type() != g.dtype) {
    out.push_back(Expected(label + ".dtype", c10::toString(g.dtype), c10::toString(t.scalar_type())));
    if (first_only) return;
  }
  if (t.device() != g.device) {
    out.push_back(Expected(label + ".device", g.device.str(), t.device().str()));
    if (first_only) return;
  }
  if (t.requires_grad() != g.requires_grad) {
    out.push_back(Expected(label + ".requires_grad", Bool(g.requires_grad), Bool(t.requires_grad())));
  }
}

std::vector<std::string> GuardSet::Collect(const std::vector<torch::Tensor>& inputs,
                                           const std::vector<torch::Tensor>& params, bool grad_mode,
                                           bool first_only) const {
  std::vector<std::string> out;
  const size_t n_params = tensors_.size() - n_inputs_;
  if (inputs.size() != n_inputs_) {
    return {Expected("input count", std::to_string(n_inputs_), std::to_string(inputs.size()))};
  }
  if (params.size() != n_params) {
    return {Expected("param count", std::to_string(n_params), std::to_string(params.size()))};
  }
  if (grad_mode != grad_mode_) {
    out.push_back(Expected("grad_mode", Bool(grad_mode_), Bool(grad_mode)));
    if (first_only) return out;
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const bool is_input = i < n_inputs_;
    const std::string label = is_input ? "input[" + std::to_string(i) + "]"
                                       : "param[" + std::to_string(i - n_inputs_) + "]";
    TensorFailures(tensors_[i], is_input ? inputs[i] : params[i - n_inputs_], label, first_only, out);
    if (first_only && !out.empty()) return out;
  }
  return out;
}

std::optional<std::string> GuardSet::Check(const std::vector<torch::Tensor>& inputs,
                                           const std::vector<torch::Tensor>& params,
                                           bool grad_mode) const {
  if (Matches(inputs, params, grad_mode)) return std::nullopt;
  auto failures = Collect(inputs, params, grad_mode, /*first_only=*/true);
  if (failures.empty()) throw std::logic_error("GuardSet: Matches() failed but no guard did");
  return std::move(failures.front());
}

std::vector<std::string> GuardSet::Failures(const std::vector<torch::Tensor>& inputs,
                                            const std::vector<torch::Tensor>& params,
                                            bool grad_mode) const {
  return Collect(inputs, params, grad_mode, /*first_only=*/false);
}

std::string GuardSet::ToString() const {
  std::string s = std::string("grad_mode=") + Bool(grad_mode_);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorGuard& g = tensors_[i];
    s += i < n_inputs_ ? " input[" + std::to_string(i) + "]=" : " param[" + std::to_string(i - n_inputs_) + "]=";
    s += c10::toString(g.dtype);
    for (size_t d = 0; d < g.sizes.size(); ++d) {
      s += (d == 0 ? "[" : ", ") + (g.sizes[d] == kDynamic ? std::string("?") : std::to_string(g.sizes[d]));
    }
    s += std::string(g.sizes.empty() ? "[]" : "]") + " " + g.device.str() + (g.requires_grad ? " requires_grad" : "");
  }
  return s;
}

}  // namespace trainyard::engine::compile
