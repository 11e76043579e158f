#include "worker/engine/compile/compiled_region.h"

#include <ATen/record_function.h>
#include <torch/csrc/jit/frontend/tracer.h>

#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace trainyard::engine::compile {
namespace {

std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

// Set while a cudagraph entry warms up and captures on this thread: a region called
// inside it runs its fn inline and becomes part of the outer graph, as under a trace.
thread_local bool g_capturing = false;

struct CapturingScope {
  CapturingScope() { g_capturing = true; }
  ~CapturingScope() { g_capturing = false; }
};

const char* ExecutorName(JitExecutorMode mode) {
  switch (mode) {
    case JitExecutorMode::kAuto:
      return "auto";
    case JitExecutorMode::kSimple:
      return "simple";
    case JitExecutorMode::kProfiling:
      return "profiling";
  }
  return "unknown";
}

}  // namespace

CompiledRegion::CompiledRegion(CompileContext& ctx, RegionKey key, RegionFn fn, int layer,
                               std::shared_ptr<const WatchedTensors> watched)
    : ctx_(ctx),
      cache_(ctx.CacheFor(key)),
      fn_(std::move(fn)),
      layer_(layer),
      watched_(watched ? std::move(watched) : std::make_shared<const WatchedTensors>()) {
  if (!fn_) throw std::invalid_argument("region " + key.str() + ": empty function");
  if (layer_ >= 0) cache_.AddLayer(layer_);
}

std::vector<torch::Tensor> CompiledRegion::operator()(const std::vector<torch::Tensor>& inputs,
                                                      const std::vector<torch::Tensor>& params) {
  // A profiler range "region:KIND" or "region:KIND#LAYER"; the name is built only while
  // an observer (the trace profiler) runs.
  at::RecordFunction range(at::RecordScope::USER_SCOPE);
  if (range.isActive()) {
    range.before("region:" + key().kind() + (layer_ >= 0 ? "#" + std::to_string(layer_) : std::string()));
  }
  RegionStats& stats = cache_.stats();
  if (ctx_.options().backend == CompileBackend::kEager) {
    ++stats.hits;
    return RunEagerBackend(inputs, params);
  }
  // Inside another region's trace: become part of that graph.
  if (torch::jit::tracer::isTracing() || g_capturing) return fn_(inputs, params);
  if (cache_.eager_only()) {
    ++stats.eager_fallbacks;
    return fn_(inputs, params);
  }
  const bool grad_mode = c10::GradMode::is_enabled();
  if (ctx_.options().backend == CompileBackend::kCudaGraph && cache_.dynamic_dims().empty()) {
    return RunCudaGraph(inputs, params, grad_mode);
  }
  if (JitExecutable* exe = cache_.Find(inputs, params, grad_mode)) {
    ++stats.hits;
    return exe->Run(inputs, params);
  }
  ++stats.misses;
  if (cache_.size() >= ctx_.options().recompile_limit) {
    if (cache_.TakeFirstLimitHit()) {
      ctx_.Emit(Event(
          v1::CompileEvent::RECOMPILE_LIMIT,
          "recompile_limit (" + std::to_string(ctx_.options().recompile_limit) +
              ") reached; last failed guard: " + cache_.ClosestFailure(inputs, params, grad_mode).value_or("none") +
              "; new guard sets run eager, cached entries still run compiled"));
    }
    ++stats.eager_fallbacks;
    return fn_(inputs, params);
  }
  return Compile(inputs, params, grad_mode);
}

std::vector<torch::Tensor> CompiledRegion::RunEagerBackend(const std::vector<torch::Tensor>& inputs,
                                                           const std::vector<torch::Tensor>& params) {
  if (cache_.side_effects_probed()) return fn_(inputs, params);
  SideEffectProbe probe(*watched_, inputs, params);
  std::vector<torch::Tensor> out = fn_(inputs, params);
  const std::vector<std::string> written = probe.Written();
  if (!written.empty()) OnSideEffect(written);  // throws under "error"
  // Under "fallback" the key already runs eager: nothing more to do.
  cache_.SetSideEffectsProbed();
  return out;
}

std::vector<torch::Tensor> CompiledRegion::RunCudaGraph(const std::vector<torch::Tensor>& inputs,
                                                        const std::vector<torch::Tensor>& params, bool grad_mode) {
  RegionStats& stats = cache_.stats();
  const GuardSet::Observation call(inputs, params, grad_mode);
  for (Graph& g : graphs_) {
    if (!g.guards.Matches(call)) continue;
    if (std::optional<std::vector<torch::Tensor>> out = g.executable->Run(inputs, params)) {
      ++stats.hits;
      return std::move(*out);
    }
    ++stats.eager_fallbacks;  // its graph's memory still waits for a backward
    return fn_(inputs, params);
  }
  ++stats.misses;
  std::optional<std::string> failed;
  for (const Graph& g : graphs_) {
    if (std::optional<std::string> f = g.guards.Check(inputs, params, grad_mode)) failed = f;
  }
  if (static_cast<int>(graphs_.size()) >= ctx_.options().recompile_limit) {
    if (cache_.TakeFirstLimitHit()) {
      ctx_.Emit(Event(v1::CompileEvent::RECOMPILE_LIMIT,
                      "recompile_limit (" + std::to_string(ctx_.options().recompile_limit) +
                          ") reached; last failed guard: " + failed.value_or("none") +
                          "; new guard sets run eager, captured graphs still replay"));
    }
    ++stats.eager_fallbacks;
    return fn_(inputs, params);
  }
  RECORD_USER_SCOPE("compile");
  GuardSet guards;
  try {
    guards = GuardSet::Capture(inputs, params, grad_mode);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(Where() + ": " + e.what());
  }
  // This call's result comes from one eager run under the probe: a region that writes
  // state would write it again on every warm-up run and replay.
  SideEffectProbe probe(*watched_, inputs, params);
  std::vector<torch::Tensor> out = fn_(inputs, params);
  const std::vector<std::string> written = probe.Written();
  if (!written.empty()) {
    OnSideEffect(written);  // throws under "error"
    ++stats.eager_fallbacks;
    return out;
  }
  const double t0 = ctx_.NowMs();
  std::unique_ptr<CudaGraphExecutable> executable;
  try {
    CapturingScope capturing;
    executable = CudaGraphExecutable::Capture(fn_, inputs, params, grad_mode, ctx_.options().graph_captures);
  } catch (const c10::Error& e) {
    // The key runs eager from now on; this call already has its eager result.
    FallBack("cudagraph capture failed: " + FirstLine(e.what_without_backtrace()));
    ++stats.eager_fallbacks;
    return out;
  } catch (const std::exception& e) {
    FallBack("cudagraph capture failed: " + FirstLine(e.what()));
    ++stats.eager_fallbacks;
    return out;
  }
  const double compile_ms = ctx_.NowMs() - t0;
  const bool first = graphs_.empty();
  const std::string captured = std::string("backend=cudagraph ") +
                               (executable->has_backward() ? "forward+backward graphs " : "forward graph ") +
                               guards.ToString();
  graphs_.push_back(Graph{std::move(guards), std::move(executable)});
  v1::CompileEvent event = first ? Event(v1::CompileEvent::COMPILE, captured)
                                 : Event(v1::CompileEvent::RECOMPILE, failed.value_or("no captured graph matched"));
  event.set_cache_entries(static_cast<int32_t>(graphs_.size()));
  event.set_compile_ms(compile_ms);
  ctx_.Emit(event);
  return out;
}

std::vector<torch::Tensor> CompiledRegion::Compile(const std::vector<torch::Tensor>& inputs,
                                                   const std::vector<torch::Tensor>& params, bool grad_mode) {
  RECORD_USER_SCOPE("compile");
  // The failed guard is taken before the new entry exists, which would match.
  const std::optional<std::string> failed = cache_.ClosestFailure(inputs, params, grad_mode);
  DynamicDims dynamic;
  for (const auto& [input, dim] : cache_.dynamic_dims()) {
    if (static_cast<size_t>(input) < inputs.size() && inputs[input].defined() && dim < inputs[input].dim() &&
        inputs[input].size(dim) > 0) {
      dynamic.emplace_back(input, dim);
    }
  }
  GuardSet guards;
  try {
    guards = GuardSet::Capture(inputs, params, grad_mode, dynamic);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(Where() + ": " + e.what());
  }
  SideEffectProbe probe(*watched_, inputs, params);
  const double t0 = ctx_.NowMs();
  JitExecutable::Traced traced;
  try {
    traced = JitExecutable::Trace(fn_, inputs, params, key().str(), ctx_.options().jit_executor);
  } catch (const c10::Error& e) {
    throw std::runtime_error(Where() + ": jit trace failed: " + e.what_without_backtrace());
  }

  // The traced run was a real eager run; from here on its outputs are this call's
  // result whatever happens to the entry, so fn never runs twice for one call.
  const std::vector<std::string> written = probe.Written();
  if (!written.empty()) {
    OnSideEffect(written);
    ++cache_.stats().eager_fallbacks;
    return std::move(traced.outputs);
  }
  const std::vector<std::string> read = CapturedWatched(*traced.executable);
  if (!read.empty()) {
    OnCapturedState(read);
    ++cache_.stats().eager_fallbacks;
    return std::move(traced.outputs);
  }

  std::string pinned;
  if (!dynamic.empty()) {
    if (std::optional<std::string> why = ProbeDynamicDims(*traced.executable, inputs, params, dynamic)) {
      guards = GuardSet::Capture(inputs, params, grad_mode);
      pinned = "; dynamic sizes guarded for this entry: " + *why;
    }
  }
  const double compile_ms = ctx_.NowMs() - t0;  // trace, plan and dynamic-dim probe

  const bool first = cache_.size() == 0;
  const std::string compiled_for =
      std::string("backend=jit executor=") + ExecutorName(traced.executable->mode()) + " " + guards.ToString();
  cache_.Add(std::move(guards), std::move(traced.executable));
  v1::CompileEvent event =
      first ? Event(v1::CompileEvent::COMPILE, compiled_for + pinned)
            : Event(v1::CompileEvent::RECOMPILE, failed.value_or("no cached entry matched") + pinned);
  event.set_compile_ms(compile_ms);
  ctx_.Emit(event);
  return std::move(traced.outputs);
}

std::optional<std::string> CompiledRegion::ProbeDynamicDims(JitExecutable& executable,
                                                            const std::vector<torch::Tensor>& inputs,
                                                            const std::vector<torch::Tensor>& params,
                                                            const DynamicDims& dynamic) const {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grown(inputs);
  std::string dims;
  for (const auto& [input, dim] : dynamic) {
    grown[input] = torch::cat({grown[input], grown[input].narrow(dim, 0, 1)}, dim);
    dims += (dims.empty() ? "" : ", ") + std::string("input[") + std::to_string(input) + "].size(" +
            std::to_string(dim) + ")";
  }
  const std::string what = dims + " is declared dynamic but the trace specialised on it";
  // Either side failing one size larger means the dims cannot vary independently.
  std::vector<torch::Tensor> got, want;
  try {
    want = fn_(grown, params);
  } catch (const std::exception& e) {
    return dims + " is declared dynamic but fn fails one size larger: " + FirstLine(e.what());
  }
  try {
    got = executable.Run(grown, params);
  } catch (const std::exception& e) {
    return what + " (the graph fails one size larger: " + FirstLine(e.what()) + ")";
  }
  bool same = got.size() == want.size();
  for (size_t i = 0; same && i < got.size(); ++i) {
    same = got[i].sizes() == want[i].sizes() && got[i].scalar_type() == want[i].scalar_type() &&
           (got[i].is_floating_point() ? torch::allclose(got[i], want[i], 1e-5, 1e-6, /*equal_nan=*/true)
                                       : torch::equal(got[i], want[i]));
  }
  if (!same) return what + " (one size larger, the graph differs from eager)";
  return std::nullopt;
}

void CompiledRegion::OnSideEffect(const std::vector<std::string>& written) {
  const std::string names = JoinNames(written);
  ctx_.Emit(Event(v1::CompileEvent::UNSAFE_SIDE_EFFECT,
                  "writes " + names + ", which it did not receive as an input or param"));
  if (ctx_.options().on_side_effect == SideEffectPolicy::kError) {
    throw std::runtime_error(Where() + ": unsafe side effect: writes " + names +
                             ", which it did not receive; return the update as an output and apply it "
                             "outside the region (or set compile on_side_effect = \"fallback\")");
  }
  if (ctx_.options().backend != CompileBackend::kEager) FallBack("unsafe side effect on " + names);
}

void CompiledRegion::OnCapturedState(const std::vector<std::string>& read) {
  const std::string names = JoinNames(read);
  if (ctx_.options().on_side_effect == SideEffectPolicy::kError) {
    throw std::runtime_error(Where() + ": reads " + names +
                             " without receiving it; the trace would bake it in as a constant "
                             "shared by every layer with this key; pass it as an input or param");
  }
  FallBack("reads " + names + " without receiving it (the trace would bake it in as a constant)");
}

void CompiledRegion::FallBack(const std::string& why) {
  cache_.SetEagerOnly();
  ctx_.Emit(Event(v1::CompileEvent::FALLBACK, why + "; the region runs eager from now on"));
}

std::vector<std::string> CompiledRegion::CapturedWatched(const JitExecutable& executable) const {
  std::vector<torch::Tensor> constants = executable.ConstantTensors();
  if (constants.empty()) return {};
  std::unordered_map<const c10::TensorImpl*, const std::string*> names;
  for (const auto& [name, tensor] : *watched_) {
    if (tensor.defined()) names.emplace(tensor.unsafeGetTensorImpl(), &name);
  }
  std::vector<std::string> out;
  for (const auto& c : constants) {
    auto it = names.find(c.unsafeGetTensorImpl());
    if (it != names.end()) out.push_back(*it->second);
  }
  return out;
}

std::string CompiledRegion::Where() const {
  return "region " + key().str() + (layer_ >= 0 ? " (layer " + std::to_string(layer_) + ")" : "");
}

v1::CompileEvent CompiledRegion::Event(v1::CompileEvent::Kind kind, std::string reason) const {
  v1::CompileEvent event;
  event.set_kind(kind);
  event.set_region(key().str());
  if (layer_ >= 0) event.add_layers(layer_);
  event.set_reason(std::move(reason));
  event.set_cache_entries(cache_.size());
  return event;
}

}  // namespace trainyard::engine::compile
