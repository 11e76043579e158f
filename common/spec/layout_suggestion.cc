// spec::SuggestLayout and DescribeSuggestion (declared in memory_estimate.h): a depth-
// first walk over the layout axes of the same world size, each candidate checked with
// every spec rule and estimated with EstimateRankMemory.
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "common/spec/memory_estimate.h"
#include "common/spec/rules.h"

namespace trainyard::spec {

namespace {

// One key of the layout search: the values it may take for `spec` (smaller first), how
// to set one, and how a changed one is named.
struct Axis {
  std::function<std::vector<std::string>(const JobSpec&)> values;
  std::function<void(JobSpec&, const std::string&)> apply;
  std::function<std::string(const JobSpec&)> value;
  std::function<std::string(const JobSpec&)> label;
};

std::vector<std::string> Divisors(int64_t n) {
  std::vector<std::string> out;
  for (int64_t i = 1; i <= n; ++i) {
    if (n % i == 0) out.push_back(std::to_string(i));
  }
  return out;
}

// The layout keys, in search order. The world size dp·tp stays; dp follows tp.
std::vector<Axis> LayoutAxes() {
  std::vector<Axis> axes;
  axes.push_back({[](const JobSpec& s) { return Divisors(int64_t{s.parallelism.dp} * s.parallelism.tp); },
                  [](JobSpec& s, const std::string& v) {
                    const int world = s.parallelism.dp * s.parallelism.tp;
                    s.parallelism.tp = std::stoi(v);
                    s.parallelism.dp = world / s.parallelism.tp;
                  },
                  [](const JobSpec& s) { return std::to_string(s.parallelism.tp); },
                  [](const JobSpec& s) {
                    return "dp=" + std::to_string(s.parallelism.dp) + " tp=" + std::to_string(s.parallelism.tp);
                  }});
  // The FSDP degree: a divisor of the (new) dp. A dp_replicate the spec gives stays
  // given and follows, dp / dp_shard; its value is part of this key's, so a tp or
  // dp_shard change that moves it names it too.
  axes.push_back({[](const JobSpec& s) { return Divisors(s.parallelism.dp); },
                  [](JobSpec& s, const std::string& v) {
                    ParallelismSpec& p = s.parallelism;
                    p.dp_shard = std::stoi(v);
                    if (p.dp_replicate != 0) p.dp_replicate = p.dp / p.dp_shard;
                  },
                  [](const JobSpec& s) {
                    return std::to_string(s.parallelism.dp_shard) + "/" + std::to_string(s.parallelism.dp_replicate);
                  },
                  [](const JobSpec& s) {
                    return "dp_shard=" + std::to_string(s.parallelism.dp_shard) +
                           (s.parallelism.dp_replicate != 0
                                ? " dp_replicate=" + std::to_string(s.parallelism.dp_replicate) : std::string());
                  }});
  axes.push_back({[](const JobSpec& s) { return Divisors(int64_t{s.parallelism.dp} * s.parallelism.tp); },
                  [](JobSpec& s, const std::string& v) { s.parallelism.ep = std::stoi(v); },
                  [](const JobSpec& s) { return std::to_string(s.parallelism.ep); },
                  [](const JobSpec& s) { return "ep=" + std::to_string(s.parallelism.ep); }});
  axes.push_back({[](const JobSpec&) { return std::vector<std::string>{"none", "selective", "full"}; },
                  [](JobSpec& s, const std::string& v) { s.activation_checkpoint.mode = v; },
                  [](const JobSpec& s) { return s.activation_checkpoint.mode; },
                  [](const JobSpec& s) { return "activation_checkpoint.mode=" + s.activation_checkpoint.mode; }});
  return axes;
}

}  // namespace

LayoutSuggestion SuggestLayout(const JobSpec& spec, double limit_bytes) {
  const std::vector<Axis> axes = LayoutAxes();
  LayoutSuggestion best, smallest;
  bool any = false;
  std::tuple<size_t, double> best_key{SIZE_MAX, 0};
  // Depth-first over the axes: every combination of their values, in axis order.
  std::function<void(size_t, JobSpec&)> walk = [&](size_t axis, JobSpec& candidate) {
    if (axis == axes.size()) {
      if (Validate(candidate).has_value()) return;
      ++best.candidates;
      std::vector<std::string> changed;
      for (const Axis& a : axes) {
        if (a.value(candidate) != a.value(spec)) changed.push_back(a.label(candidate));
      }
      MemoryEstimate e = EstimateRankMemory(candidate);
      if (!any || e.total_bytes() < smallest.estimate.total_bytes()) {
        any = true;
        smallest.spec = candidate;
        smallest.changed = changed;
        smallest.estimate = e;
      }
      const std::tuple<size_t, double> key{changed.size(), e.total_bytes()};
      if (e.total_bytes() <= limit_bytes && key < best_key) {
        best_key = key;
        best.fits = true;
        best.spec = candidate;
        best.changed = changed;
        best.estimate = std::move(e);
      }
      return;
    }
    const JobSpec before = candidate;
    for (const std::string& v : axes[axis].values(before)) {
      candidate = before;
      axes[axis].apply(candidate, v);
      walk(axis + 1, candidate);
    }
    candidate = before;
  };
  JobSpec candidate = spec;
  walk(0, candidate);
  if (best.fits) return best;
  smallest.candidates = best.candidates;
  return smallest;
}

std::string DescribeSuggestion(const JobSpec& spec, const LayoutSuggestion& g) {
  auto keys = [](const std::vector<std::string>& changed) {
    std::string out;
    for (const std::string& c : changed) out += (out.empty() ? "" : " ") + c;
    return out;
  };
  if (g.fits) return "fits at " + keys(g.changed) + ": " + FormatBytes(g.estimate.total_bytes());
  const std::string world = std::to_string(int64_t{spec.parallelism.dp} * spec.parallelism.tp);
  if (g.candidates == 0 || g.changed.empty()) return "no layout of dp·tp=" + world + " ranks fits";
  return "no layout of dp·tp=" + world + " ranks fits (the smallest, " + keys(g.changed) + ", needs " +
         FormatBytes(g.estimate.total_bytes()) + ")";
}

}  // namespace trainyard::spec
