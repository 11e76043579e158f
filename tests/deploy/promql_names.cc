#include "tests/deploy/promql_names.h"

#include <cctype>
#include <regex>
#include <sstream>

namespace trainyard::testing {
namespace {

bool IdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
bool IdentChar(char c) { return IdentStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

// Index after the string literal starting at s[i] ('"', '\'' or '`').
size_t SkipString(const std::string& s, size_t i) {
  const char quote = s[i++];
  while (i < s.size() && s[i] != quote) i += (s[i] == '\\' && quote != '`') ? 2 : 1;
  return std::min(i + 1, s.size());
}

size_t SkipSpace(const std::string& s, size_t i) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

// The identifiers of a parenthesised list starting at s[i] == '(' ("(job_id, region)").
std::set<std::string> LabelList(const std::string& s, size_t* i) {
  std::set<std::string> out;
  size_t j = *i + 1;
  while (j < s.size() && s[j] != ')') {
    if (IdentStart(s[j])) {
      size_t k = j;
      while (k < s.size() && IdentChar(s[k])) ++k;
      out.insert(s.substr(j, k - j));
      j = k;
    } else {
      ++j;
    }
  }
  *i = std::min(j + 1, s.size());
  return out;
}

// The label names of the matchers in s[i] == '{' ... '}'.
std::set<std::string> Matchers(const std::string& s, size_t* i) {
  std::set<std::string> out;
  size_t j = *i + 1;
  while (j < s.size() && s[j] != '}') {
    if (s[j] == '"' || s[j] == '\'' || s[j] == '`') {
      j = SkipString(s, j);
    } else if (IdentStart(s[j])) {
      size_t k = j;
      while (k < s.size() && IdentChar(s[k])) ++k;
      out.insert(s.substr(j, k - j));
      j = k;
    } else {
      ++j;
    }
  }
  *i = std::min(j + 1, s.size());
  return out;
}

const std::set<std::string>& Keywords() {
  static const std::set<std::string> k = {"by",  "without", "on",  "ignoring", "group_left", "group_right",
                                          "and", "or",      "unless", "bool", "offset", "inf", "nan", "Inf", "NaN"};
  return k;
}

const std::set<std::string>& Aggregations() {
  static const std::set<std::string> a = {"sum",    "min",    "max",  "avg",      "group", "stddev",
                                          "stdvar", "count",  "count_values", "bottomk", "topk", "quantile"};
  return a;
}

}  // namespace

ExprNames NamesOf(const std::string& raw) {
  // Grafana's variables: ${name}, ${name:format}, [[name]] and $name.
  std::string s = std::regex_replace(raw, std::regex(R"(\$\{[^}]*\}|\[\[[^\]]*\]\]|\$[A-Za-z_][A-Za-z0-9_]*)"), "VAR");
  ExprNames out;
  // label_values(METRIC_SELECTOR, LABEL) and label_values(LABEL) are Grafana's, not PromQL.
  std::smatch m;
  if (std::regex_match(s, m, std::regex(R"(\s*label_values\(\s*(.*?)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*)"))) {
    out = NamesOf(m[1].str());
    out.result_labels.insert(m[2].str());
    return out;
  }
  if (std::regex_match(s, m, std::regex(R"(\s*label_values\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*)"))) {
    out.result_labels.insert(m[1].str());
    return out;
  }
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"' || c == '\'' || c == '`') {
      i = SkipString(s, i);
      continue;
    }
    if (c == '[') {  // a range or subquery: [5m], [1h:1m]
      while (i < s.size() && s[i] != ']') ++i;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {  // 0.95, 5m, 1e3
      while (i < s.size() && (IdentChar(s[i]) || s[i] == '.')) ++i;
      continue;
    }
    if (!IdentStart(c)) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < s.size() && IdentChar(s[end])) ++end;
    const std::string ident = s.substr(i, end - i);
    size_t next = SkipSpace(s, end);
    const char after = next < s.size() ? s[next] : '\0';
    if (Keywords().count(ident)) {
      if (after == '(' && ident != "and" && ident != "or" && ident != "unless") {
        const std::set<std::string> labels = LabelList(s, &next);
        out.grouping.insert(labels.begin(), labels.end());
        i = next;
      } else {
        i = end;
      }
      continue;
    }
    // A function or an aggregation ("sum by (le) (...)" has its clause first).
    if (after == '(' || Aggregations().count(ident)) {
      i = end;
      continue;
    }
    Selector sel{ident, {}};
    if (after == '{') {
      sel.labels = Matchers(s, &next);
      i = next;
    } else {
      i = end;
    }
    out.selectors.push_back(std::move(sel));
  }
  return out;
}

std::vector<std::string> DashboardExpressions(const nlohmann::json& dashboard) {
  std::vector<std::string> out;
  std::vector<const nlohmann::json*> panels;
  if (dashboard.contains("panels")) {
    for (const auto& p : dashboard["panels"]) panels.push_back(&p);
  }
  for (size_t i = 0; i < panels.size(); ++i) {
    const nlohmann::json& p = *panels[i];
    if (p.contains("panels")) {
      for (const auto& nested : p["panels"]) panels.push_back(&nested);
    }
    if (!p.contains("targets")) continue;
    for (const auto& t : p["targets"]) {
      if (t.contains("expr") && t["expr"].is_string()) out.push_back(t["expr"].get<std::string>());
    }
  }
  if (dashboard.contains("templating") && dashboard["templating"].contains("list")) {
    for (const auto& v : dashboard["templating"]["list"]) {
      if (v.value("type", "") != "query" || !v.contains("query")) continue;
      const auto& q = v["query"];
      if (q.is_string()) out.push_back(q.get<std::string>());
      if (q.is_object() && q.contains("query") && q["query"].is_string()) out.push_back(q["query"].get<std::string>());
    }
  }
  return out;
}

Exposition ParseExposition(const std::string& text) {
  Exposition out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, type;
      words >> name >> type;
      out.types[name] = type;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    size_t end = 0;
    while (end < line.size() && IdentChar(line[end])) ++end;
    std::set<std::string>& labels = out.samples[line.substr(0, end)];
    if (end < line.size() && line[end] == '{') {
      const std::set<std::string> names = Matchers(line, &end);
      labels.insert(names.begin(), names.end());
    }
  }
  return out;
}

std::vector<std::string> Problems(const std::string& expr, const Exposition& exposition) {
  std::vector<std::string> problems;
  const ExprNames names = NamesOf(expr);
  std::set<std::string> carried;  // every label of every selected metric's samples
  for (const Selector& sel : names.selectors) {
    auto it = exposition.samples.find(sel.metric);
    if (it == exposition.samples.end()) {
      // A histogram family with no observation has no _bucket sample only if it has
      // no series at all; its # TYPE line still names it.
      bool histogram_part = false;
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string sfx(suffix);
        if (sel.metric.size() > sfx.size() && sel.metric.compare(sel.metric.size() - sfx.size(), sfx.size(), sfx) == 0) {
          auto type = exposition.types.find(sel.metric.substr(0, sel.metric.size() - sfx.size()));
          histogram_part = histogram_part || (type != exposition.types.end() && type->second == "histogram");
        }
      }
      if (!histogram_part) problems.push_back("metric " + sel.metric + " is not exported");
      continue;
    }
    carried.insert(it->second.begin(), it->second.end());
    for (const std::string& label : sel.labels) {
      if (label != "__name__" && !it->second.count(label)) {
        problems.push_back("metric " + sel.metric + " has no label " + label);
      }
    }
  }
  for (const std::string& label : names.grouping) {
    if (!carried.count(label)) problems.push_back("no selected metric carries the grouping label " + label);
  }
  for (const std::string& label : names.result_labels) {
    if (!carried.count(label)) problems.push_back("label_values: no selected metric carries " + label);
  }
  if (names.selectors.empty()) problems.push_back("no metric selected");
  return problems;
}

}  // namespace trainyard::testing
