#include "worker/engine/model/regions/region_factory.h"

#include "worker/engine/compile/compiled_region.h"

namespace trainyard::engine {
namespace {

using compile::RegionFn;
using compile::RegionKey;
using torch::Tensor;

class Eager final : public RegionFactory {
 public:
  RegionCall Make(const RegionKey&, RegionFn fn, int, DynamicDims) override { return fn; }
  void GraphBreak(const RegionKey&, const std::string&) override {}
  bool RunsEager() const override { return true; }
};

class Compiled final : public RegionFactory {
 public:
  Compiled(compile::CompileContext& ctx, std::shared_ptr<const compile::WatchedTensors> watched)
      : ctx_(ctx), watched_(std::move(watched)) {}

  RegionCall Make(const RegionKey& key, RegionFn fn, int layer, DynamicDims dynamic) override {
    auto region = std::make_shared<compile::CompiledRegion>(ctx_, key, std::move(fn), layer, watched_);
    for (const auto& [input, dim] : dynamic) region->SetDynamicDim(input, dim);
    return [region](const std::vector<Tensor>& inputs, const std::vector<Tensor>& params) {
      return (*region)(inputs, params);
    };
  }

  void GraphBreak(const RegionKey& adjacent, const std::string& cause) override {
    ctx_.ReportGraphBreak(adjacent, cause);
  }

  bool RunsEager() const override { return ctx_.options().backend == compile::CompileBackend::kEager; }

 private:
  compile::CompileContext& ctx_;
  std::shared_ptr<const compile::WatchedTensors> watched_;
};

}  // namespace

RegionFactory& EagerRegionFactory() {
  static Eager* eager = new Eager();
  return *eager;
}

std::unique_ptr<RegionFactory> MakeCompiledRegionFactory(compile::CompileContext& ctx,
                                                         std::shared_ptr<const compile::WatchedTensors> watched) {
  return std::make_unique<Compiled>(ctx, std::move(watched));
}

}  // namespace trainyard::engine
