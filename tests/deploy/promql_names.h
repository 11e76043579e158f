// The metric names and label names a Grafana dashboard's PromQL uses, and the names a
// Prometheus text exposition holds: enough of PromQL to check a dashboard against what
// the controller exports (no full parser: the dashboard's expressions are ours).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainyard::testing {

// One metric selector of an expression: `name{label="v", ...}` or `name[5m]` or `name`.
struct Selector {
  std::string metric;
  std::set<std::string> labels;  // the label names its matchers use
};

struct ExprNames {
  std::vector<Selector> selectors;
  std::set<std::string> grouping;  // labels of by (...), without (...), on (...), ...
  std::set<std::string> result_labels;  // label_values(METRIC, LABEL): LABEL
};

// The names in one PromQL expression (Grafana variables such as $job, ${job} or
// $__rate_interval are taken out first; string literals are skipped).
ExprNames NamesOf(const std::string& expr);

// Every PromQL expression of a dashboard: targets[].expr of every panel (rows'
// nested panels too) and the query of every templating variable of type "query".
std::vector<std::string> DashboardExpressions(const nlohmann::json& dashboard);

// What a /metrics exposition holds: metric family name -> type (# TYPE lines), and
// sample name -> the label names its samples carry.
struct Exposition {
  std::map<std::string, std::string> types;
  std::map<std::string, std::set<std::string>> samples;
};
Exposition ParseExposition(const std::string& text);

// The problems of `expr` against `exposition`: a metric it selects that is not
// exported (a histogram's _bucket/_sum/_count count when the family is a histogram),
// a matcher's label that the metric's samples never carry, a grouping label no
// selected metric carries. Empty when it is fine.
std::vector<std::string> Problems(const std::string& expr, const Exposition& exposition);

}  // namespace trainyard::testing
