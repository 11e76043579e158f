// Sweeps in the `trainyard` CLI: the wire axes built from a job file's [sweep] table and
// --sweep flags (and that each value reads back as the value it was), the tables and
// lines printed for a sweep (sweep_format.h), and submit, get, list, cancel and watch of
// a sweep through RunCli against a small fake of the sweep RPCs on a loopback port.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/cli/cli_format.h"
#include "client/cli/commands.h"
#include "client/cli/sweep_format.h"
#include "client/cli/sweep_request.h"
#include "common/base/clock.h"
#include "common/events/proto_json.h"
#include "common/spec/overrides.h"
#include "common/spec/schema.h"
#include "common/spec/spec_input.h"
#include "tests/fakes/loopback_server.h"

namespace trainyard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// What the controller does with one wire value: reads it as --set reads a value and
// types it as `section.key`.
spec::FieldValue ReadBack(const std::string& text, const char* section, const char* key) {
  spec::SpecInput input;
  std::optional<spec::SpecError> e = input.Set(section, key, spec::ParseOverrideValue(text), "test");
  EXPECT_FALSE(e.has_value()) << text << ": " << (e ? e->ToString() : "");
  const spec::Assignment* a = input.Find(section, key);
  return a == nullptr ? spec::FieldValue{} : a->value;
}

std::vector<std::string> Words(const std::string& line) { return absl::StrSplit(line, ' ', absl::SkipEmpty()); }

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// ---- the request ------------------------------------------------------------------

constexpr char kGridFile[] =
    "[job]\nname = \"lr-grid\"\n[training]\nsteps = 20\n"
    "[sweep]\nmax_concurrent = 3\ntraining.lr = [1e-4, 3e-4]\n";

TEST(SweepRequestTest, TableAndFlagAxesInOrderWithTheirTexts) {
  const std::string path = WriteFile("sweep_grid.toml", kGridFile);
  absl::StatusOr<cli::SweepSubmission> loaded =
      cli::LoadSweepSubmission(path, {}, spec::SweepFlags{{"model.top_k=2,4"}, std::nullopt});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->points, 4u);
  const v1::SubmitSweepRequest request = cli::BuildSubmitSweepRequest(loaded->job);
  ASSERT_EQ(request.axes_size(), 2);
  EXPECT_EQ(request.axes(0).key(), "training.lr");
  EXPECT_THAT(request.axes(0).values(), ElementsAre("0.0001", "0.0003"));
  EXPECT_EQ(request.axes(1).key(), "model.top_k");
  EXPECT_THAT(request.axes(1).values(), ElementsAre("2", "4"));
  EXPECT_EQ(request.max_concurrent(), 3);
  // The base is the file without its [sweep] table: the swept key is not in it.
  EXPECT_EQ(request.spec().job().name(), "lr-grid");
  EXPECT_EQ(request.spec().training().steps(), 20);
  EXPECT_FALSE(request.spec().training().has_lr());
}

TEST(SweepRequestTest, MaxConcurrentFlagWinsOverTheTable) {
  const std::string path = WriteFile("sweep_grid_flag.toml", kGridFile);
  absl::StatusOr<cli::SweepSubmission> loaded = cli::LoadSweepSubmission(path, {}, spec::SweepFlags{{}, 5});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(cli::BuildSubmitSweepRequest(loaded->job).max_concurrent(), 5);
}

TEST(SweepRequestTest, NoSweepIsAnOrdinaryJob) {
  const std::string path = WriteFile("sweep_none.toml", "[job]\nname = \"plain\"\n");
  absl::StatusOr<cli::SweepSubmission> loaded = cli::LoadSweepSubmission(path, {"training.steps=3"}, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->points, 0u);
  EXPECT_TRUE(loaded->job.sweep.axes.empty());
}

TEST(SweepRequestTest, AStringAxisIsSentQuoted) {
  const std::string path = WriteFile("sweep_strings.toml", "[job]\nname = \"sf\"\n");
  absl::StatusOr<cli::SweepSubmission> loaded =
      cli::LoadSweepSubmission(path, {}, spec::SweepFlags{{"model.score_func=softmax,sigmoid"}, std::nullopt});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const v1::SubmitSweepRequest request = cli::BuildSubmitSweepRequest(loaded->job);
  ASSERT_EQ(request.axes_size(), 1);
  EXPECT_THAT(request.axes(0).values(), ElementsAre("\"softmax\"", "\"sigmoid\""));
}

// The wire values of one axis of `values` on `section.key`, as the CLI sends them.
std::vector<std::string> WireValues(const char* section, const char* key, std::vector<spec::FieldValue> values) {
  spec::Sweep sweep;
  sweep.axes.push_back({spec::FindField(section, key), std::move(values), "test", ""});
  const std::vector<v1::SweepAxis> axes = cli::WireAxes(sweep);
  EXPECT_EQ(axes.size(), 1u);
  EXPECT_EQ(axes.at(0).key(), std::string(section) + "." + key);
  return {axes.at(0).values().begin(), axes.at(0).values().end()};
}

// A long path with quotes, a backslash, a tab, a comma and non-ASCII letters comes back
// whole: nothing cut, nothing escaped into something TOML does not read.
TEST(SweepRequestTest, StringValuesReadBackWhole) {
  const std::string tricky =
      std::string("/data/caf\xc3\xa9/\"q\"\\x\t,") + std::string(150, 'a') + "\xe2\x98\x83" + std::string(1, '\x01');
  const std::vector<std::string> strings = {"", "softmax", "a b", tricky};
  const std::vector<std::string> texts =
      WireValues("training", "dataset_path", std::vector<spec::FieldValue>(strings.begin(), strings.end()));
  ASSERT_EQ(texts.size(), strings.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(texts[i].front(), '"') << texts[i];
    EXPECT_EQ(std::get<std::string>(ReadBack(texts[i], "training", "dataset_path")), strings[i]) << texts[i];
  }
}

TEST(SweepRequestTest, NumbersAndBooleansReadBackTheSameValue) {
  const std::vector<double> doubles = {1e-4, 3e-4, 0.1, 1.0 / 3, 1e-7, 2.5e20, 20.0, 123456.789, 8e-4};
  const std::vector<std::string> double_texts =
      WireValues("training", "lr", std::vector<spec::FieldValue>(doubles.begin(), doubles.end()));
  ASSERT_EQ(double_texts.size(), doubles.size());
  for (size_t i = 0; i < doubles.size(); ++i) {
    EXPECT_EQ(std::get<double>(ReadBack(double_texts[i], "training", "lr")), doubles[i]) << double_texts[i];
  }
  const std::vector<int> ints = {1, 2, 0, -3, std::numeric_limits<int>::max()};
  const std::vector<std::string> int_texts =
      WireValues("model", "top_k", std::vector<spec::FieldValue>(ints.begin(), ints.end()));
  ASSERT_EQ(int_texts.size(), ints.size());
  for (size_t i = 0; i < ints.size(); ++i) {
    EXPECT_EQ(std::get<int>(ReadBack(int_texts[i], "model", "top_k")), ints[i]) << int_texts[i];
  }
  const std::vector<std::uint64_t> seeds = {0, 42,
                                            static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())};
  const std::vector<std::string> seed_texts =
      WireValues("training", "seed", std::vector<spec::FieldValue>(seeds.begin(), seeds.end()));
  ASSERT_EQ(seed_texts.size(), seeds.size());
  for (size_t i = 0; i < seeds.size(); ++i) {
    EXPECT_EQ(std::get<std::uint64_t>(ReadBack(seed_texts[i], "training", "seed")), seeds[i]) << seed_texts[i];
  }
  const std::vector<std::string> bool_texts = WireValues("profiling", "enable", {true, false});
  ASSERT_EQ(bool_texts.size(), 2u);
  EXPECT_TRUE(std::get<bool>(ReadBack(bool_texts[0], "profiling", "enable")));
  EXPECT_FALSE(std::get<bool>(ReadBack(bool_texts[1], "profiling", "enable")));
}

// ---- formatting -------------------------------------------------------------------

v1::SweepChild Child(int index, v1::Job::State state, std::optional<std::pair<int64_t, double>> validation,
                     int64_t last_step = 0) {
  v1::SweepChild c;
  c.set_job_id("job-" + std::to_string(10 + index));
  c.set_index(index);
  c.set_label("i=" + std::to_string(index));
  c.set_state(state);
  c.set_last_step(last_step);
  if (validation) {
    c.mutable_last_validation()->set_step(validation->first);
    c.mutable_last_validation()->set_loss(validation->second);
  }
  return c;
}

// Seven children: two with the same loss (2.5, indices 1 and 3), one NaN, two without
// a validation.
v1::SweepView RankingView() {
  v1::SweepView view;
  view.mutable_sweep()->set_id("sweep-7");
  view.mutable_sweep()->set_name("grid");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  *view.add_children() = Child(0, v1::Job::PENDING, std::nullopt);
  *view.add_children() = Child(1, v1::Job::RUNNING, {{20, 2.5}}, 25);
  *view.add_children() = Child(2, v1::Job::SUCCEEDED, {{40, 2.1}}, 40);
  *view.add_children() = Child(3, v1::Job::RUNNING, {{20, 2.5}}, 22);
  *view.add_children() = Child(4, v1::Job::FAILED, {{10, nan}}, 12);
  *view.add_children() = Child(5, v1::Job::PENDING, std::nullopt);
  *view.add_children() = Child(6, v1::Job::SUCCEEDED, {{40, 1.9}}, 40);
  return view;
}

TEST(SweepFormatTest, RankingIsByLossThenIndexWithTheUnrankedLast) {
  const v1::SweepView view = RankingView();
  std::vector<std::pair<int, std::string>> got;
  for (const cli::RankedChild& r : cli::RankSweepChildren(view)) got.emplace_back(r.rank, r.child->job_id());
  const std::vector<std::pair<int, std::string>> want = {{1, "job-16"}, {2, "job-12"}, {3, "job-11"}, {4, "job-13"},
                                                         {0, "job-14"}, {0, "job-10"}, {0, "job-15"}};
  EXPECT_EQ(got, want);
}

TEST(SweepFormatTest, RankingTable) {
  const std::vector<std::string> lines = Lines(cli::FormatSweepRanking(RankingView()));
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(lines[0], "RANK  JOB     STATE      STEP  VAL_LOSS  VAL_STEP  LABEL");
  EXPECT_EQ(lines[1], "1     job-16  SUCCEEDED  40    1.9000    40        i=6");
  EXPECT_EQ(Words(lines[2]), (std::vector<std::string>{"2", "job-12", "SUCCEEDED", "40", "2.1000", "40", "i=2"}));
  EXPECT_EQ(Words(lines[3]), (std::vector<std::string>{"3", "job-11", "RUNNING", "25", "2.5000", "20", "i=1"}));
  EXPECT_EQ(Words(lines[4]), (std::vector<std::string>{"4", "job-13", "RUNNING", "22", "2.5000", "20", "i=3"}));
  EXPECT_EQ(Words(lines[5]), (std::vector<std::string>{"-", "job-14", "FAILED", "12", "nan", "10", "i=4"}));
  EXPECT_EQ(Words(lines[6]), (std::vector<std::string>{"-", "job-10", "PENDING", "-", "-", "-", "i=0"}));
  EXPECT_EQ(Words(lines[7]), (std::vector<std::string>{"-", "job-15", "PENDING", "-", "-", "-", "i=5"}));
}

TEST(SweepFormatTest, StateCountsText) {
  EXPECT_EQ(cli::FormatStateCounts({{"PENDING", 3}, {"RUNNING", 2}, {"SUCCEEDED", 1}}),
            "2 running, 3 pending, 1 succeeded");
  EXPECT_EQ(cli::FormatStateCounts({{"CANCELLED", 4}, {"FAILED", 0}, {"SUCCEEDED", 1}, {"RESTARTING", 1}}),
            "1 restarting, 1 succeeded, 4 cancelled");
  EXPECT_EQ(cli::FormatStateCounts({{"ZOMBIE", 2}, {"SCHEDULED", 1}}), "1 scheduled, 2 zombie");
  EXPECT_EQ(cli::FormatStateCounts({}), "-");
  // Counted from the children when the view has no counts.
  EXPECT_EQ(cli::FormatStateCounts(cli::SweepStateCounts(RankingView())),
            "2 running, 2 pending, 2 succeeded, 1 failed");
}

TEST(SweepFormatTest, ChangeLines) {
  v1::SweepView before;
  before.mutable_sweep()->set_name("grid");
  *before.add_children() = Child(0, v1::Job::PENDING, std::nullopt);
  *before.add_children() = Child(1, v1::Job::RUNNING, {{10, 3.0}});
  *before.add_children() = Child(2, v1::Job::FAILED, std::nullopt);
  before.mutable_children(2)->set_reason("rank 0 exited 1");
  v1::SweepView now = before;
  now.mutable_children(0)->set_state(v1::Job::RUNNING);
  now.mutable_children(1)->mutable_last_validation()->set_step(20);
  now.mutable_children(1)->mutable_last_validation()->set_loss(2.34125);
  EXPECT_THAT(cli::SweepChangeLines(&before, now),
              ElementsAre("job-10 grid-0 (i=0) RUNNING", "job-11 grid-1 (i=1) val_loss 2.3413 @ step 20"));
  EXPECT_THAT(cli::SweepChangeLines(&now, now), ElementsAre());
  // The validation that ran before the child ended comes before its end.
  v1::SweepView ended = now;
  ended.mutable_children(1)->set_state(v1::Job::SUCCEEDED);
  ended.mutable_children(1)->mutable_last_validation()->set_step(30);
  EXPECT_THAT(cli::SweepChangeLines(&now, ended),
              ElementsAre("job-11 grid-1 (i=1) val_loss 2.3413 @ step 30", "job-11 grid-1 (i=1) SUCCEEDED"));
  // The first look: every child's state, and the validations it has.
  EXPECT_THAT(
      cli::SweepChangeLines(nullptr, before),
      ElementsAre("job-10 grid-0 (i=0) PENDING", "job-11 grid-1 (i=1) RUNNING",
                  "job-11 grid-1 (i=1) val_loss 3.0000 @ step 10", "job-12 grid-2 (i=2) FAILED: rank 0 exited 1"));
}

v1::SweepView ListedSweep(const std::string& id, const std::string& name, int children,
                          std::map<std::string, int32_t> states, int max_concurrent) {
  v1::SweepView view;
  view.mutable_sweep()->set_id(id);
  view.mutable_sweep()->set_name(name);
  view.mutable_sweep()->set_owner("alice");
  view.mutable_sweep()->set_max_concurrent(max_concurrent);
  view.mutable_sweep()->mutable_create_time()->set_seconds(1796378523);  // 2026-12-04T10:02:03Z
  for (int i = 0; i < children; ++i) view.mutable_sweep()->add_job_ids("job-" + std::to_string(i + 1));
  view.mutable_states()->insert(states.begin(), states.end());
  return view;
}

TEST(SweepFormatTest, SweepsTable) {
  const std::vector<std::string> lines = Lines(cli::FormatSweepsTable(
      {ListedSweep("sweep-2", "lr-grid", 6, {{"RUNNING", 2}, {"PENDING", 3}, {"SUCCEEDED", 1}}, 2),
       ListedSweep("sweep-1", "seeds", 3, {{"SUCCEEDED", 3}}, 0)}));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(Words(lines[0]),
            (std::vector<std::string>{"SWEEP", "NAME", "OWNER", "CHILDREN", "MAX_CONCURRENT", "CREATED", "STATES"}));
  EXPECT_THAT(lines[1], StartsWith("sweep-2  lr-grid  alice  6         2               2026-12-04T10:02:03Z  "));
  EXPECT_THAT(lines[1], ::testing::EndsWith("  2 running, 3 pending, 1 succeeded"));
  EXPECT_THAT(lines[2], StartsWith("sweep-1  seeds    alice  3         -               2026-12-04T10:02:03Z  "));
  EXPECT_THAT(lines[2], ::testing::EndsWith("  3 succeeded"));
}

TEST(SweepFormatTest, SweepsWithChildrenInStates) {
  const std::vector<v1::SweepView> sweeps = {ListedSweep("sweep-2", "a", 2, {{"RUNNING", 2}}, 0),
                                             ListedSweep("sweep-1", "b", 2, {{"SUCCEEDED", 2}, {"RUNNING", 0}}, 0)};
  EXPECT_EQ(cli::SweepsWithChildrenIn(sweeps, {}).size(), 2u);
  const std::vector<v1::SweepView> running = cli::SweepsWithChildrenIn(sweeps, {v1::Job::RUNNING});
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0].sweep().id(), "sweep-2");
  EXPECT_TRUE(cli::SweepsWithChildrenIn(sweeps, {v1::Job::FAILED}).empty());
}

TEST(SweepFormatTest, CancelCountsOnlyWhatThisCancelEnded) {
  v1::SweepView before = RankingView();  // job-12 and job-16 SUCCEEDED, job-14 FAILED
  v1::SweepView after = before;
  for (v1::SweepChild& c : *after.mutable_children()) {
    if (!IsTerminal(c.state())) c.set_state(v1::Job::CANCELLED);
  }
  after.set_ended(true);
  EXPECT_EQ(cli::FormatSweepCancel(before, after),
            "sweep-7: cancelled 4 of 7 children (3 had already ended)\n"
            "states     2 succeeded, 1 failed, 4 cancelled; ended\n");
  EXPECT_EQ(cli::FormatSweepCancel(after, after),
            "sweep-7: nothing to cancel: every child had already ended\n"
            "states     2 succeeded, 1 failed, 4 cancelled; ended\n");
}

TEST(SweepFormatTest, ExitCodeIsZeroOnlyWhenEveryChildSucceeded) {
  v1::SweepView view;
  (*view.mutable_states())["SUCCEEDED"] = 3;
  EXPECT_EQ(cli::SweepExitCode(view), cli::kExitOk);
  (*view.mutable_states())["CANCELLED"] = 1;
  EXPECT_EQ(cli::SweepExitCode(view), cli::kExitJobFailed);
  (*view.mutable_states())["RUNNING"] = 1;
  EXPECT_EQ(cli::SweepExitCode(view), cli::kExitError);
}

TEST(SweepFormatTest, SubmittedSweepStartsWithItsId) {
  v1::SweepView view = RankingView();
  const std::vector<std::string> lines = Lines(cli::FormatSubmittedSweep(view));
  ASSERT_EQ(lines.size(), 9u);
  EXPECT_EQ(lines[0], "sweep-7");
  EXPECT_EQ(Words(lines[1]), (std::vector<std::string>{"JOB", "INDEX", "NAME", "STATE", "LABEL"}));
  EXPECT_EQ(Words(lines[2]), (std::vector<std::string>{"job-10", "0", "grid-0", "PENDING", "i=0"}));
  EXPECT_EQ(Words(lines[8]), (std::vector<std::string>{"job-16", "6", "grid-6", "SUCCEEDED", "i=6"}));
}

// ---- through RunCli, against a fake of the sweep RPCs ------------------------------

// Answers the sweep RPCs and ListJobs; GetSweep answers its script in order (the last
// entry again and again). Thread-safe.
class FakeSweepService final : public v1::JobService::Service {
 public:
  using Answer = std::variant<v1::SweepView, grpc::Status>;

  void ScriptGet(std::vector<Answer> answers) {
    absl::MutexLock lock(&mu_);
    gets_.assign(answers.begin(), answers.end());
  }
  void SetList(std::vector<v1::SweepView> sweeps, std::vector<v1::Job> jobs) {
    absl::MutexLock lock(&mu_);
    sweeps_ = std::move(sweeps);
    jobs_ = std::move(jobs);
  }
  void SetCancelAnswer(const v1::SweepView& view) {
    absl::MutexLock lock(&mu_);
    cancel_answer_ = view;
  }
  std::vector<v1::SubmitSweepRequest> Submitted() {
    absl::MutexLock lock(&mu_);
    return submitted_;
  }
  std::vector<v1::ListJobsRequest> Lists() {
    absl::MutexLock lock(&mu_);
    return lists_;
  }
  std::vector<v1::CancelSweepRequest> Cancels() {
    absl::MutexLock lock(&mu_);
    return cancels_;
  }
  int Gets() {
    absl::MutexLock lock(&mu_);
    return get_calls_;
  }

  grpc::Status SubmitSweep(grpc::ServerContext*, const v1::SubmitSweepRequest* request, v1::SweepView* view) override {
    absl::MutexLock lock(&mu_);
    submitted_.push_back(*request);
    view->mutable_sweep()->set_id("sweep-1");
    view->mutable_sweep()->set_name(request->spec().job().name());
    *view->mutable_sweep()->mutable_axes() = request->axes();
    view->mutable_sweep()->set_max_concurrent(request->max_concurrent());
    int n = 1;
    for (const v1::SweepAxis& a : request->axes()) n *= a.values_size();
    for (int i = 0; i < n; ++i) {
      v1::SweepChild* c = view->add_children();
      c->set_job_id("job-" + std::to_string(i + 1));
      c->set_index(i);
      c->set_label("p" + std::to_string(i));
      c->set_state(v1::Job::PENDING);
      view->mutable_sweep()->add_job_ids(c->job_id());
    }
    (*view->mutable_states())["PENDING"] = n;
    return grpc::Status::OK;
  }
  grpc::Status GetSweep(grpc::ServerContext*, const v1::GetSweepRequest* request, v1::SweepView* view) override {
    absl::MutexLock lock(&mu_);
    ++get_calls_;
    if (gets_.empty()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "sweep " + request->id() + " not found");
    const Answer answer = gets_.front();
    if (gets_.size() > 1) gets_.pop_front();
    if (const grpc::Status* status = std::get_if<grpc::Status>(&answer)) return *status;
    *view = std::get<v1::SweepView>(answer);
    return grpc::Status::OK;
  }
  grpc::Status ListSweeps(grpc::ServerContext*, const v1::ListSweepsRequest*,
                          v1::ListSweepsResponse* response) override {
    absl::MutexLock lock(&mu_);
    for (const v1::SweepView& v : sweeps_) *response->add_sweeps() = v;
    return grpc::Status::OK;
  }
  grpc::Status CancelSweep(grpc::ServerContext*, const v1::CancelSweepRequest* request, v1::SweepView* view) override {
    absl::MutexLock lock(&mu_);
    cancels_.push_back(*request);
    *view = cancel_answer_;
    return grpc::Status::OK;
  }
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override {
    absl::MutexLock lock(&mu_);
    lists_.push_back(*request);
    for (const v1::Job& j : jobs_) {
      if (request->without_sweep_children() && !j.sweep_id().empty()) continue;
      if (request->states_size() > 0 &&
          std::find(request->states().begin(), request->states().end(), j.state()) == request->states().end()) {
        continue;
      }
      *response->add_jobs() = j;
    }
    return grpc::Status::OK;
  }

 private:
  absl::Mutex mu_;
  std::deque<Answer> gets_ ABSL_GUARDED_BY(mu_);
  int get_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::SweepView> sweeps_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Job> jobs_ ABSL_GUARDED_BY(mu_);
  v1::SweepView cancel_answer_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::SubmitSweepRequest> submitted_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ListJobsRequest> lists_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::CancelSweepRequest> cancels_ ABSL_GUARDED_BY(mu_);
};

// A clock whose sleeps return at once, moving its time: watch's polls run back to back.
class SteppingClock : public Clock {
 public:
  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void SleepFor(absl::Duration d) override {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  bool AwaitWithDeadline(absl::Mutex*, const absl::Condition& cond, absl::Time) override { return cond.Eval(); }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1'700'000'000);
};

class CliSweepTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(server_.ok()); }

  int Run(std::vector<std::string> args) {
    args.insert(args.begin(), "trainyard");
    args.push_back("--controller");
    args.push_back(server_.address());
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    out_.str("");
    err_.str("");
    cli::CliEnvironment env;
    env.out = &out_;
    env.err = &err_;
    env.clock = &clock_;
    return cli::RunCli(static_cast<int>(argv.size()), argv.data(), env);
  }

  FakeSweepService service_;
  testing::LoopbackServer server_{&service_};
  SteppingClock clock_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(CliSweepTest, SubmitSendsTheAxesAndPrintsTheSweepIdThenItsChildren) {
  const std::string path = WriteFile("cli_sweep_submit.toml", kGridFile);
  ASSERT_EQ(Run({"submit", path, "--sweep", "model.top_k=2,4", "--max-concurrent", "2"}), 0) << err_.str();
  const std::vector<v1::SubmitSweepRequest> sent = service_.Submitted();
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(sent[0].axes_size(), 2);
  EXPECT_EQ(sent[0].axes(0).key(), "training.lr");
  EXPECT_THAT(sent[0].axes(0).values(), ElementsAre("0.0001", "0.0003"));
  EXPECT_EQ(sent[0].axes(1).key(), "model.top_k");
  EXPECT_THAT(sent[0].axes(1).values(), ElementsAre("2", "4"));
  EXPECT_EQ(sent[0].max_concurrent(), 2);
  EXPECT_EQ(sent[0].spec().job().name(), "lr-grid");
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 6u) << out_.str();
  EXPECT_EQ(lines[0], "sweep-1");
  EXPECT_EQ(Words(lines[1]), (std::vector<std::string>{"JOB", "INDEX", "NAME", "STATE", "LABEL"}));
  EXPECT_EQ(Words(lines[5]), (std::vector<std::string>{"job-4", "3", "lr-grid-3", "PENDING", "p3"}));
}

TEST_F(CliSweepTest, SubmitAddsAfterToTheBase) {
  const std::string path = WriteFile("cli_sweep_after.toml", kGridFile);
  ASSERT_EQ(Run({"submit", path, "--after", "job-9"}), 0) << err_.str();
  ASSERT_EQ(service_.Submitted().size(), 1u);
  EXPECT_EQ(service_.Submitted()[0].spec().job().after(), "job-9");
}

TEST_F(CliSweepTest, MaxConcurrentWithoutASweepIsRefusedLocally) {
  const std::string path = WriteFile("cli_sweep_nosweep.toml", "[job]\nname = \"plain\"\n");
  EXPECT_EQ(Run({"submit", path, "--max-concurrent", "2"}), cli::kExitUsage);
  EXPECT_EQ(err_.str(),
            "trainyard: INVALID_ARGUMENT: --max-concurrent needs a sweep (--sweep section.key=V1,V2 or a [sweep] "
            "table)\n");
  EXPECT_TRUE(service_.Submitted().empty());
}

TEST_F(CliSweepTest, ABadPointIsReportedBeforeAnyCall) {
  const std::string path = WriteFile("cli_sweep_bad.toml", "[job]\nname = \"g\"\n");
  EXPECT_EQ(Run({"submit", path, "--sweep", "training.lr=1e-4,-1"}), cli::kExitUsage);
  EXPECT_THAT(err_.str(), StartsWith("trainyard: INVALID_ARGUMENT: --sweep training.lr: sweep point 1 of 2 (lr=-1): "
                                     "training.lr must be in"));
  EXPECT_TRUE(service_.Submitted().empty());
}

TEST_F(CliSweepTest, ListLeavesChildrenOutAndAddsTheSweepsTable) {
  v1::Job plain;
  plain.set_id("job-1");
  plain.set_state(v1::Job::RUNNING);
  v1::Job child = plain;
  child.set_id("job-2");
  child.set_sweep_id("sweep-1");
  service_.SetList({ListedSweep("sweep-1", "lr-grid", 1, {{"RUNNING", 1}}, 0)}, {plain, child});
  ASSERT_EQ(Run({"list"}), 0) << err_.str();
  ASSERT_EQ(service_.Lists().size(), 1u);
  EXPECT_TRUE(service_.Lists()[0].without_sweep_children());
  std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 5u) << out_.str();
  EXPECT_THAT(lines[0], StartsWith("ID "));
  EXPECT_THAT(lines[1], StartsWith("job-1 "));
  EXPECT_EQ(lines[2], "");
  EXPECT_THAT(lines[3], StartsWith("SWEEP "));
  EXPECT_THAT(lines[4], StartsWith("sweep-1 "));

  ASSERT_EQ(Run({"list", "--with-sweep-children"}), 0) << err_.str();
  EXPECT_FALSE(service_.Lists().back().without_sweep_children());
  lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 6u) << out_.str();
  EXPECT_THAT(lines[2], StartsWith("job-2 "));

  // --state: only the sweeps with a child in that state.
  ASSERT_EQ(Run({"list", "--state", "failed"}), 0) << err_.str();
  EXPECT_EQ(Lines(out_.str()).size(), 1u) << out_.str();

  // JSON: every job, one kind of object per line.
  ASSERT_EQ(Run({"list", "--json"}), 0) << err_.str();
  EXPECT_FALSE(service_.Lists().back().without_sweep_children());
  EXPECT_EQ(Lines(out_.str()).size(), 2u) << out_.str();
}

TEST_F(CliSweepTest, GetPrintsTheHeaderAndTheRanking) {
  v1::SweepView view = RankingView();
  view.mutable_sweep()->set_owner("alice");
  view.mutable_sweep()->set_max_concurrent(2);
  view.mutable_sweep()->mutable_create_time()->set_seconds(1796378523);
  v1::SweepAxis* axis = view.mutable_sweep()->add_axes();
  axis->set_key("training.lr");
  axis->add_values("0.0001");
  axis->add_values("0.0003");
  view.mutable_children(4)->set_reason("rank 0 exited 1");
  service_.ScriptGet({view});
  ASSERT_EQ(Run({"get", "sweep-7"}), 0) << err_.str();
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_GE(lines.size(), 17u) << out_.str();
  EXPECT_EQ(lines[0], "sweep-7  grid  owner alice");
  EXPECT_EQ(lines[1], "created    2026-12-04 10:02:03Z");
  EXPECT_EQ(lines[2], "children   7, at most 2 at once (max_concurrent)");
  EXPECT_EQ(lines[3], "axes       training.lr = 0.0001, 0.0003");
  EXPECT_EQ(lines[4], "states     2 running, 2 pending, 2 succeeded, 1 failed");
  EXPECT_EQ(lines[5], "");
  EXPECT_THAT(lines[6], StartsWith("RANK "));
  EXPECT_THAT(lines[7], StartsWith("1     job-16 "));
  EXPECT_EQ(lines[14], "");
  EXPECT_EQ(lines[15], "failed:");
  EXPECT_EQ(lines[16], "  job-14 grid-4 (i=4) FAILED: rank 0 exited 1");

  ASSERT_EQ(Run({"get", "sweep-7", "--output", "json"}), 0) << err_.str();
  v1::SweepView parsed;
  ASSERT_TRUE(FromJson(Lines(out_.str()).at(0), &parsed).ok()) << out_.str();
  EXPECT_EQ(parsed.children_size(), 7);
}

TEST_F(CliSweepTest, GetOfAnUnknownSweepIsNotFound) {
  EXPECT_EQ(Run({"get", "sweep-99"}), cli::kExitNotFound);
  EXPECT_THAT(err_.str(), HasSubstr("sweep sweep-99 not found"));
}

TEST_F(CliSweepTest, CancelSaysHowManyChildrenItCancelled) {
  v1::SweepView before = RankingView();
  v1::SweepView after = before;
  for (v1::SweepChild& c : *after.mutable_children()) {
    if (!IsTerminal(c.state())) c.set_state(v1::Job::CANCELLED);
  }
  service_.ScriptGet({before});
  service_.SetCancelAnswer(after);
  ASSERT_EQ(Run({"cancel", "sweep-7", "--reason", "wrong grid"}), 0) << err_.str();
  ASSERT_EQ(service_.Cancels().size(), 1u);
  EXPECT_EQ(service_.Cancels()[0].id(), "sweep-7");
  EXPECT_EQ(service_.Cancels()[0].reason(), "wrong grid");
  EXPECT_THAT(out_.str(), StartsWith("sweep-7: cancelled 4 of 7 children (3 had already ended)\n"));
}

// Three looks at a two-child sweep: both pending; one running with a validation; both
// ended, one FAILED.
std::vector<FakeSweepService::Answer> WatchScript(v1::Job::State second_end) {
  v1::SweepView a;
  a.mutable_sweep()->set_id("sweep-3");
  a.mutable_sweep()->set_name("g");
  *a.add_children() = Child(0, v1::Job::PENDING, std::nullopt);
  *a.add_children() = Child(1, v1::Job::PENDING, std::nullopt);
  v1::SweepView b = a;
  b.mutable_children(0)->set_state(v1::Job::RUNNING);
  b.mutable_children(0)->mutable_last_validation()->set_step(20);
  b.mutable_children(0)->mutable_last_validation()->set_loss(2.5);
  v1::SweepView c = b;
  c.mutable_children(0)->set_state(v1::Job::SUCCEEDED);
  c.mutable_children(1)->set_state(second_end);
  c.set_ended(true);
  return {a, b, c};
}

TEST_F(CliSweepTest, WatchPrintsChangesThenTheRankingAndExitsLikeWatch) {
  service_.ScriptGet(WatchScript(v1::Job::FAILED));
  EXPECT_EQ(Run({"watch", "sweep-3"}), cli::kExitJobFailed) << err_.str();
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 11u) << out_.str();
  EXPECT_EQ(lines[0], "job-10 g-0 (i=0) PENDING");
  EXPECT_EQ(lines[1], "job-11 g-1 (i=1) PENDING");
  EXPECT_EQ(lines[2], "job-10 g-0 (i=0) RUNNING");
  EXPECT_EQ(lines[3], "job-10 g-0 (i=0) val_loss 2.5000 @ step 20");
  EXPECT_EQ(lines[4], "job-10 g-0 (i=0) SUCCEEDED");
  EXPECT_EQ(lines[5], "job-11 g-1 (i=1) FAILED");
  EXPECT_EQ(lines[6], "");
  EXPECT_EQ(lines[7], "sweep-3 ended: 1 succeeded, 1 failed");
  EXPECT_THAT(lines[8], StartsWith("RANK "));
  EXPECT_THAT(lines[9], StartsWith("1     job-10 "));
  EXPECT_THAT(lines[10], StartsWith("-     job-11 "));
  EXPECT_EQ(service_.Gets(), 3);

  service_.ScriptGet(WatchScript(v1::Job::SUCCEEDED));
  EXPECT_EQ(Run({"watch", "sweep-3"}), cli::kExitOk) << err_.str();
}

TEST_F(CliSweepTest, WatchRidesOutAnOutageAndGivesUpAfterReconnectFor) {
  std::vector<FakeSweepService::Answer> script = WatchScript(v1::Job::SUCCEEDED);
  script.insert(script.begin() + 1, grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting"));
  service_.ScriptGet(script);
  EXPECT_EQ(Run({"watch", "sweep-3"}), cli::kExitOk) << err_.str();
  EXPECT_THAT(err_.str(), HasSubstr("connection to the controller lost (UNAVAILABLE: restarting)"));
  EXPECT_THAT(err_.str(), HasSubstr("reconnected after 1s"));

  script = WatchScript(v1::Job::SUCCEEDED);
  script.resize(1);
  script.push_back(grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone"));
  service_.ScriptGet(script);
  EXPECT_EQ(Run({"watch", "sweep-3", "--reconnect-for", "3"}), cli::kExitUnavailable);
  EXPECT_THAT(err_.str(), HasSubstr("gave up reconnecting after 3s, --reconnect-for"));
}

TEST_F(CliSweepTest, WatchJsonPrintsTheViewWhenItChanges) {
  service_.ScriptGet(WatchScript(v1::Job::SUCCEEDED));
  EXPECT_EQ(Run({"watch", "sweep-3", "--json"}), cli::kExitOk) << err_.str();
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 3u) << out_.str();
  v1::SweepView last;
  ASSERT_TRUE(FromJson(lines[2], &last).ok());
  EXPECT_TRUE(last.ended());
}

TEST_F(CliSweepTest, WatchTakesASweepAlone) {
  EXPECT_EQ(Run({"watch", "sweep-3", "job-4"}), cli::kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("watch takes a sweep id alone"));
  EXPECT_EQ(Run({"watch", "sweep-3", "--from-seq", "5"}), cli::kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--from-seq is for a job's events; a sweep has none"));
  EXPECT_EQ(service_.Gets(), 0);
}

TEST_F(CliSweepTest, SubmitWaitWatchesTheSweep) {
  service_.ScriptGet(WatchScript(v1::Job::CANCELLED));
  const std::string path = WriteFile("cli_sweep_wait.toml", kGridFile);
  EXPECT_EQ(Run({"submit", path, "--wait"}), cli::kExitJobFailed) << err_.str();
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_GE(lines.size(), 5u);
  EXPECT_EQ(lines[0], "sweep-1");
  EXPECT_THAT(out_.str(), HasSubstr("\njob-11 g-1 (i=1) CANCELLED\n"));
}

}  // namespace
}  // namespace trainyard
