// trainyard-sweep-store-bench: what a sweep of --points children costs the controller.
// A JobManager over a real SqliteJobStore (WAL, synchronous=FULL: every commit is
// fsynced) in a fresh temp folder, with one registered worker of --slots slots, then
// times SubmitSweep (expand, validate and admit every point, store the sweep and every
// child with its PENDING event in one transaction, and the scheduling pass after it),
// GetSweep (every child, with its newest validation read from the store), ListSweeps
// and CancelSweep (every child in one write); and the refusal of 10x the limit. Each
// figure is the best and the median of --runs runs. Prints figures; asserts nothing.
//
//   trainyard-sweep-store-bench                 # 1,000 points, 3 runs
//   trainyard-sweep-store-bench --points 100 --runs 5
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "server/metrics/controller_metrics.h"
#include "server/state/event_hub.h"
#include "server/state/job_manager.h"
#include "server/store/sqlite_job_store.h"
#include "tests/fakes/fake_worker_channel.h"

namespace {

using namespace trainyard;

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A request of `points` points over two axes: 10 learning rates x points/10 seeds.
v1::SubmitSweepRequest Request(int points, int max_concurrent) {
  v1::SubmitSweepRequest request;
  v1::JobSpec* spec = request.mutable_spec();
  spec->mutable_job()->set_name("bench");
  spec->mutable_model()->set_preset("tiny");
  spec->mutable_parallelism()->set_dp(1);
  spec->mutable_resources()->set_device("cpu");
  v1::SweepAxis* lr = request.add_axes();
  lr->set_key("training.lr");
  const int lrs = points >= 10 ? 10 : 1;
  for (int i = 1; i <= lrs; ++i) lr->add_values(absl::StrCat(i, "e-4"));
  v1::SweepAxis* seed = request.add_axes();
  seed->set_key("training.seed");
  for (int i = 1; i <= points / lrs; ++i) seed->add_values(std::to_string(i));
  request.set_max_concurrent(max_concurrent);
  return request;
}

struct Figures {
  std::vector<double> submit, get, list, cancel, refuse;
};

void Report(const char* what, std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  std::printf("%-52s best %9.2f ms   median %9.2f ms\n", what, ms.front(), ms[ms.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainyard-sweep-store-bench: the controller's cost of storing, reading and cancelling a sweep"};
  int points = 1000, runs = 3, slots = 8;
  app.add_option("--points", points, "children of the sweep (at most 1000, the controller's limit)")
      ->check(CLI::Range(10, 1000));
  app.add_option("--runs", runs, "runs, each in a fresh store")->check(CLI::Range(1, 50));
  app.add_option("--slots", slots, "slots of the one registered worker")->check(CLI::Range(1, 10));
  CLI11_PARSE(app, argc, argv);

  Figures f;
  for (int run = 0; run < runs; ++run) {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / absl::StrCat("trainyard-sweep-store-bench-", ::getpid(), "-", run);
    std::filesystem::remove_all(dir);
    auto store = SqliteJobStore::Open(dir.string());
    if (!store.ok()) {
      std::fprintf(stderr, "store: %s\n", std::string(store.status().message()).c_str());
      return 1;
    }
    EventHub hub;
    ControllerMetrics metrics;
    JobManager manager(store->get(), &hub, &metrics, SystemClock(), JobManagerOptions{});
    v1::Register reg;
    reg.set_name("w1");
    reg.set_slots(slots);
    reg.set_address("w1.local");
    reg.set_rendezvous_port_min(40000);
    reg.set_rendezvous_port_max(40009);
    if (auto s = manager.RegisterWorker(1, reg, std::make_shared<testing::FakeWorkerChannel>()); !s.ok()) {
      std::fprintf(stderr, "register: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    const v1::SubmitSweepRequest request = Request(points, 4);
    auto t0 = std::chrono::steady_clock::now();
    auto view = manager.SubmitSweep(request, "alice");
    f.submit.push_back(Since(t0));
    if (!view.ok() || view->sweep().job_ids_size() != points) {
      std::fprintf(stderr, "submit: %s\n", std::string(view.status().message()).c_str());
      return 1;
    }
    t0 = std::chrono::steady_clock::now();
    auto got = manager.GetSweep(view->sweep().id());
    f.get.push_back(Since(t0));
    if (!got.ok() || got->children_size() != points) return 1;
    t0 = std::chrono::steady_clock::now();
    const std::vector<v1::SweepView> listed = manager.ListSweeps(0);
    f.list.push_back(Since(t0));
    if (listed.size() != 1) return 1;
    t0 = std::chrono::steady_clock::now();
    auto cancelled = manager.CancelSweep(view->sweep().id(), "bench");
    f.cancel.push_back(Since(t0));
    if (!cancelled.ok() || !cancelled->ended()) return 1;
    // Ten times the limit: 100 x 100 values, refused from the counts.
    v1::SubmitSweepRequest huge = Request(1000, 0);
    huge.mutable_axes(0)->clear_values();
    for (int i = 1; i <= 100; ++i) huge.mutable_axes(0)->add_values(absl::StrCat(i, "e-5"));
    huge.mutable_axes(1)->clear_values();
    for (int i = 1; i <= 100; ++i) huge.mutable_axes(1)->add_values(std::to_string(i));
    t0 = std::chrono::steady_clock::now();
    auto refused = manager.SubmitSweep(huge, "alice");
    f.refuse.push_back(Since(t0));
    if (refused.ok()) return 1;
    if (run == 0) std::printf("refusal: %s\n", std::string(refused.status().message()).c_str());
    std::filesystem::remove_all(dir);
  }
  std::printf("points %d, runs %d, one worker of %d slots, max_concurrent 4\n", points, runs, slots);
  Report(absl::StrCat("SubmitSweep (validate, admit, store ", points, " children)").c_str(), f.submit);
  Report(absl::StrCat("GetSweep (", points, " children, their validations)").c_str(), f.get);
  Report("ListSweeps (one sweep)", f.list);
  Report(absl::StrCat("CancelSweep (", points, " children, one write)").c_str(), f.cancel);
  Report("SubmitSweep refused (10,000 points)", f.refuse);
  return 0;
}
