// A small MLflow tracking server for the exporter's tests, on FakeHttpServer: the REST
// calls the controller makes (experiments/get-by-name and create, runs/search, create,
// log-batch, update), kept in memory. Metrics are stored once per (key, step,
// timestamp, value), as MLflow's SQL store does, and every logged row is counted too,
// so a test can tell a resend that was deduplicated from one that was lost. A test
// sets a fault that answers instead (a 500, HTML, a redirect loop, ...) or holds the
// answer after the call was applied (a reply lost to a timeout).
//
// Thread-safe.
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "tests/fakes/fake_http_server.h"

namespace trainyard::testing {

class FakeMlflowServer {
 public:
  struct Point {
    int64_t step;
    int64_t timestamp;
    double value;  // NaN stays NaN
    bool operator<(const Point& o) const {
      auto key = [](const Point& p) { return std::make_tuple(p.step, p.timestamp, std::isnan(p.value) ? 0 : 1, std::isnan(p.value) ? 0.0 : p.value); };
      return key(*this) < key(o);
    }
  };
  struct Run {
    std::string experiment_id;
    std::string name;
    std::string status = "RUNNING";
    int64_t start_time = 0;
    int64_t end_time = 0;
    std::map<std::string, std::string> params;
    std::map<std::string, std::string> tags;
    std::map<std::string, std::set<Point>> metrics;
    int rows_logged = 0;  // metric rows received, duplicates included
  };
  // Answers a request instead of the fake (return true), or lets it through (false).
  using Fault = std::function<bool(mg_connection*, const FakeHttpRequest&)>;

  FakeMlflowServer() {
    for (const char* path : {"experiments/get-by-name", "experiments/create", "runs/search", "runs/create",
                             "runs/log-batch", "runs/update"}) {
      const std::string name = path;
      http_.Handle(absl::StrCat("/api/2.0/mlflow/", name),
                   [this, name](mg_connection* conn, const FakeHttpRequest& r) { Serve(name, conn, r); });
    }
  }

  std::string uri() const { return http_.Url(""); }
  FakeHttpServer& http() { return http_; }
  void SetFault(Fault fault) {
    absl::MutexLock lock(&mu_);
    fault_ = std::move(fault);
  }
  // Applies the next log-batch that carries metrics, then runs `after` before answering (a test blocks there
  // past the client's timeout: the call landed, its answer did not).
  void AfterNextLogBatch(std::function<void()> after) {
    absl::MutexLock lock(&mu_);
    after_log_batch_ = std::move(after);
  }
  std::map<std::string, Run> runs() const {
    absl::MutexLock lock(&mu_);
    return runs_;
  }
  std::map<std::string, std::string> experiments() const {
    absl::MutexLock lock(&mu_);
    return experiments_;
  }

 private:
  static void Error(mg_connection* conn, int status, const std::string& code, const std::string& message) {
    FakeHttpServer::Reply(conn, status, nlohmann::json{{"error_code", code}, {"message", message}}.dump());
  }
  static double Value(const nlohmann::json& v) {
    if (v.is_string()) {
      const std::string s = v.get<std::string>();
      if (s == "NaN") return std::nan("");
      return s == "Infinity" ? INFINITY : -INFINITY;
    }
    return v.get<double>();
  }

  void Serve(const std::string& name, mg_connection* conn, const FakeHttpRequest& r) {
    Fault fault;
    {
      absl::MutexLock lock(&mu_);
      fault = fault_;
    }
    if (fault && fault(conn, r)) return;
    nlohmann::json in = nlohmann::json::parse(r.body.empty() ? "{}" : r.body, nullptr, false);
    if (in.is_discarded()) return Error(conn, 400, "MALFORMED_REQUEST", "bad json");
    std::function<void()> after;
    nlohmann::json out = nlohmann::json::object();
    {
      absl::MutexLock lock(&mu_);
      if (name == "experiments/get-by-name") {
        const std::string prefix = "experiment_name=";
        const std::string want = r.query.substr(0, prefix.size()) == prefix ? r.query.substr(prefix.size()) : "";
        for (const auto& [id, n] : experiments_) {
          if (n == want) out = {{"experiment", {{"experiment_id", id}, {"name", n}}}};
        }
        if (!out.contains("experiment")) return Error(conn, 404, "RESOURCE_DOES_NOT_EXIST", "no experiment");
      } else if (name == "experiments/create") {
        const std::string id = std::to_string(experiments_.size() + 1);
        experiments_[id] = in.at("name").get<std::string>();
        out = {{"experiment_id", id}};
      } else if (name == "runs/search") {
        const std::string filter = in.value("filter", "");
        nlohmann::json found = nlohmann::json::array();
        for (const auto& [id, run] : runs_) {
          auto tag = run.tags.find("trainyard.job_id");
          if (tag != run.tags.end() && filter.find("'" + tag->second + "'") != std::string::npos) {
            found.push_back({{"info", {{"run_id", id}}}});
          }
        }
        if (!found.empty()) out = {{"runs", found}};
      } else if (name == "runs/create") {
        const std::string id = absl::StrCat("run", runs_.size() + 1);
        Run& run = runs_[id];
        run.experiment_id = in.at("experiment_id").get<std::string>();
        run.name = in.value("run_name", "");
        run.start_time = in.value("start_time", int64_t{0});
        for (const auto& t : in.value("tags", nlohmann::json::array())) run.tags[t.at("key")] = t.at("value");
        out = {{"run", {{"info", {{"run_id", id}}}}}};
      } else if (name == "runs/log-batch" || name == "runs/update") {
        auto it = runs_.find(in.value("run_id", ""));
        if (it == runs_.end()) return Error(conn, 404, "RESOURCE_DOES_NOT_EXIST", "no run");
        Run& run = it->second;
        if (name == "runs/update") {
          run.status = in.at("status").get<std::string>();
          run.end_time = in.value("end_time", int64_t{0});
        } else {
          const auto& metrics = in.value("metrics", nlohmann::json::array());
          const auto& params = in.value("params", nlohmann::json::array());
          const auto& tags = in.value("tags", nlohmann::json::array());
          if (metrics.size() > 1000 || params.size() > 100 || tags.size() > 100) {
            return Error(conn, 400, "INVALID_PARAMETER_VALUE", "batch over MLflow's limits");
          }
          for (const auto& p : params) {
            const std::string key = p.at("key"), value = p.at("value");
            if (key.size() > 250 || value.size() > 6000) return Error(conn, 400, "INVALID_PARAMETER_VALUE", "param too long");
            auto [at, inserted] = run.params.emplace(key, value);
            if (!inserted && at->second != value) return Error(conn, 400, "INVALID_PARAMETER_VALUE", "param changed");
          }
          for (const auto& t : tags) run.tags[t.at("key")] = t.at("value");
          for (const auto& m : metrics) {
            run.metrics[m.at("key")].insert({m.at("step").get<int64_t>(), m.at("timestamp").get<int64_t>(), Value(m.at("value"))});
            ++run.rows_logged;
          }
          if (!metrics.empty()) {
            after = std::move(after_log_batch_);
            after_log_batch_ = nullptr;
          }
        }
      }
    }
    if (after) after();
    FakeHttpServer::Reply(conn, 200, out.dump());
  }

  FakeHttpServer http_;
  mutable absl::Mutex mu_;
  Fault fault_ ABSL_GUARDED_BY(mu_);
  std::function<void()> after_log_batch_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> experiments_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Run> runs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::testing
