// The TensorBoard writer's pieces: CRC-32C and the TFRecord framing against known
// values, the event-to-record mapping, and the run writer's files, its refusal to
// overwrite and its exact resume after a crash. TensorBoard's own reader checks the
// files of a real job in tests/integration/tensorboard_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "common/base/file_io.h"
#include "common/base/text.h"
#include "common/tensorboard/event_summaries.h"
#include "common/tensorboard/job_run_writer.h"
#include "common/tensorboard/tfrecord.h"
#include "tests/common/tensorboard/tensorboard_files.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_process.h"

namespace trainyard::testing {
namespace {

namespace fs = std::filesystem;
using tensorboard::AttemptCounters;
using tensorboard::Event;

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(tensorboard::Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(tensorboard::Crc32c(""), 0u);
  // RFC 3720 B.4: 32 bytes of zeros.
  EXPECT_EQ(tensorboard::Crc32c(std::string(32, '\0')), 0x8A9136AAu);
}

TEST(TfRecordTest, FramesLengthDataAndMaskedCrcs) {
  std::string out;
  tensorboard::AppendRecord("abc", &out);
  ASSERT_EQ(out.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(out.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(out.substr(12, 3), "abc");
  // TensorFlow's mask, computed by hand: rotate right by 15, add 0xa282ead8.
  const uint32_t crc = tensorboard::Crc32c("abc");
  const uint32_t masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
  uint32_t stored = 0;
  for (int i = 3; i >= 0; --i) stored = (stored << 8) | static_cast<unsigned char>(out[15 + i]);
  EXPECT_EQ(stored, masked);
  // Records one after another read back whole, an empty one (a legal empty Event) too.
  std::string two;
  tensorboard::AppendRecord(tensorboard::FileVersionEvent(1.0).SerializeAsString(), &two);
  tensorboard::AppendRecord("", &two);
  std::string error;
  const std::vector<Event> read = ParseRecords(two, &error);
  EXPECT_EQ(error, "");
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0].file_version(), "brain.Event:2");
  two[20] ^= 1;  // a flipped bit in the first record's data
  (void)ParseRecords(two, &error);
  EXPECT_EQ(error, "data crc at 0");
}

v1::Event Step(int64_t seq, int attempt, int64_t step, double loss) {
  v1::Event e;
  e.set_job_id("job-1");
  e.set_seq(seq);
  e.set_attempt(attempt);
  e.mutable_time()->set_seconds(1700000000 + seq);
  e.mutable_time()->set_nanos(500000000);
  v1::StepMetrics* m = e.mutable_step_metrics();
  m->set_step(step);
  m->set_loss(loss);
  m->set_lr(1e-3);
  m->set_grad_norm(2.5);
  m->set_tokens_per_s(1234.5);
  m->set_step_ms(40);
  m->add_expert_load(10);
  m->add_expert_load(30);
  m->set_imbalance(1.5);
  m->set_dropped_tokens(6);
  return e;
}

std::map<std::string, float> Scalars(const std::vector<Event>& records) {
  std::map<std::string, float> out;
  for (const Event& r : records) {
    for (const auto& v : r.summary().value()) {
      if (v.value_case() == tensorboard::Summary::Value::kSimpleValue) out[v.tag()] = v.simple_value();
    }
  }
  return out;
}

TEST(EventSummariesTest, StepMetricsBecomeScalarsAtTheirStep) {
  AttemptCounters counters;
  const std::vector<Event> records = tensorboard::Summarize(Step(3, 1, 7, 4.25), &counters);
  ASSERT_FALSE(records.empty());
  for (const Event& r : records) {
    EXPECT_EQ(r.step(), 7);
    EXPECT_DOUBLE_EQ(r.wall_time(), 1700000003.5);
  }
  const std::map<std::string, float> s = Scalars(records);
  EXPECT_EQ(s.at("train/loss"), 4.25f);
  EXPECT_EQ(s.at("train/lr"), static_cast<float>(1e-3));
  EXPECT_EQ(s.at("perf/tokens_per_s"), 1234.5f);
  EXPECT_EQ(s.at("experts/load/expert1"), 30.0f);
  EXPECT_EQ(s.at("experts/imbalance"), 1.5f);
  EXPECT_EQ(s.at("experts/dropped_tokens"), 6.0f);
  // 0 means unknown for these, so they are left out rather than drawn at 0.
  EXPECT_EQ(s.count("perf/mfu"), 0u);
  EXPECT_EQ(s.count("train/epoch"), 0u);
  EXPECT_EQ(s.count("memory/peak_tensor_bytes"), 0u);
  EXPECT_EQ(counters.last_step, 7);
}

TEST(EventSummariesTest, NanAndInfinityAreWrittenAsStored) {
  AttemptCounters counters;
  v1::Event e = Step(1, 1, 1, std::numeric_limits<double>::quiet_NaN());
  e.mutable_step_metrics()->set_grad_norm(std::numeric_limits<double>::infinity());
  e.mutable_step_metrics()->set_lr(-std::numeric_limits<double>::infinity());
  const std::map<std::string, float> s = Scalars(tensorboard::Summarize(e, &counters));
  EXPECT_TRUE(std::isnan(s.at("train/loss")));
  EXPECT_EQ(s.at("train/grad_norm"), std::numeric_limits<float>::infinity());
  EXPECT_EQ(s.at("train/lr"), -std::numeric_limits<float>::infinity());
  // A double beyond float's range is rounded to infinity, as TensorBoard's float would.
  e.mutable_step_metrics()->set_loss(1e300);
  EXPECT_EQ(Scalars(tensorboard::Summarize(e, &counters)).at("train/loss"), std::numeric_limits<float>::infinity());
}

TEST(EventSummariesTest, CompilesAndStallsAreRunningCountsAtTheLatestStep) {
  AttemptCounters counters;
  (void)tensorboard::Summarize(Step(1, 1, 5, 1.0), &counters);
  v1::Event c;
  c.set_seq(2);
  c.set_attempt(1);
  c.mutable_compile()->set_kind(v1::CompileEvent::RECOMPILE);
  c.mutable_compile()->set_compile_ms(12.5);
  std::vector<Event> r = tensorboard::Summarize(c, &counters);
  EXPECT_EQ(Scalars(r).at("compile/recompiles"), 1.0f);
  EXPECT_EQ(Scalars(r).at("compile/compile_ms"), 12.5f);
  EXPECT_EQ(r.at(0).step(), 5);
  r = tensorboard::Summarize(c, &counters);
  EXPECT_EQ(Scalars(r).at("compile/recompiles"), 2.0f);
  v1::Event s;
  s.set_attempt(1);
  s.mutable_stall()->set_step(6);
  s.mutable_stall()->set_waited_s(30);
  r = tensorboard::Summarize(s, &counters);
  EXPECT_EQ(Scalars(r).at("faults/stalls"), 1.0f);
  EXPECT_EQ(Scalars(r).at("faults/stall_waited_s"), 30.0f);
  EXPECT_EQ(r.at(0).step(), 6);
  v1::Event log;
  log.mutable_log()->set_message("hello");
  EXPECT_TRUE(tensorboard::Summarize(log, &counters).empty()) << "logs are not scalars";
}

TEST(EventSummariesTest, SpecTextIsTheTextPluginsStringTensorAndValidUtf8) {
  v1::JobSpec spec;
  spec.mutable_job()->set_name(std::string("bad \xff\xfe name"));
  spec.mutable_training()->set_steps(42);
  const Event e = tensorboard::SpecTextEvent(spec, 5.0);
  ASSERT_EQ(e.summary().value_size(), 1);
  const auto& v = e.summary().value(0);
  EXPECT_EQ(v.tag(), "spec");
  EXPECT_EQ(v.metadata().plugin_data().plugin_name(), "text");
  EXPECT_EQ(v.tensor().dtype(), tensorboard::DT_STRING);
  ASSERT_EQ(v.tensor().string_val_size(), 1);
  const std::string& text = v.tensor().string_val(0);
  EXPECT_TRUE(IsUtf8(text)) << text;
  EXPECT_NE(text.find("\"steps\": 42"), std::string::npos) << text;
  EXPECT_EQ(text.rfind("```json\n", 0), 0u);
}

std::vector<Event> ReadRun(const std::string& dir) {
  std::vector<fs::path> files;
  for (const auto& f : fs::directory_iterator(dir)) files.push_back(f.path());
  EXPECT_EQ(files.size(), 1u) << dir;
  if (files.empty()) return {};
  const std::string bytes = *ReadFile(files[0].string(), 1 << 26);
  std::string error;
  std::vector<Event> out = ParseRecords(bytes, &error);
  EXPECT_EQ(error, "") << files[0];
  return out;
}

std::vector<int64_t> LossSteps(const std::vector<Event>& records) {
  std::vector<int64_t> steps;
  for (const Event& r : records) {
    for (const auto& v : r.summary().value()) {
      if (v.tag() == "train/loss") steps.push_back(r.step());
    }
  }
  return steps;
}

tensorboard::JobRunWriterOptions Options(const std::string& root, bool keep) {
  tensorboard::JobRunWriterOptions o;
  o.root = root;
  o.host = "testhost";
  o.keep_progress = keep;
  return o;
}

TEST(JobRunWriterTest, OneRunFolderPerAttemptStartingWithFileVersionAndSpec) {
  TempDir tmp;
  v1::JobSpec spec;
  spec.mutable_job()->set_name("j");
  auto w = tensorboard::JobRunWriter::Open(Options(tmp.path(), false), "job-1", spec);
  ASSERT_TRUE(w.ok()) << w.status();
  v1::Event pending;  // before the first schedule: attempt 0, no run
  pending.set_seq(1);
  pending.mutable_job_state()->set_state(v1::Job::PENDING);
  EXPECT_FALSE((*w)->Add(pending));
  EXPECT_TRUE((*w)->Add(Step(2, 1, 1, 3.0)));
  EXPECT_TRUE((*w)->Add(Step(3, 1, 2, 2.0)));
  EXPECT_FALSE((*w)->Add(Step(3, 1, 2, 2.0))) << "a seq already taken is skipped";
  EXPECT_TRUE((*w)->Add(Step(4, 2, 2, 1.5)));
  ASSERT_TRUE((*w)->Flush().ok());
  const std::map<int, std::string> runs = (*w)->run_dirs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs.at(1), tmp.path() + "/job-1/attempt-1");
  const std::vector<Event> one = ReadRun(runs.at(1));
  ASSERT_GE(one.size(), 2u);
  EXPECT_EQ(one[0].file_version(), "brain.Event:2");
  EXPECT_EQ(one[1].summary().value(0).tag(), "spec");
  EXPECT_EQ(LossSteps(one), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(LossSteps(ReadRun(runs.at(2))), (std::vector<int64_t>{2}));
  EXPECT_TRUE(fs::exists(fs::path(runs.at(2)) / "events.out.tfevents.1700000004.testhost.trainyard"));
  EXPECT_FALSE(fs::exists(tmp.path() + "/job-1/.trainyard-tensorboard.json")) << "no progress without keep_progress";

  // Never over an earlier export.
  auto again = tensorboard::JobRunWriter::Open(Options(tmp.path(), false), "job-1", spec);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
}

TEST(JobRunWriterTest, HostileJobIdsAndOutputFolders) {
  TempDir tmp;
  for (const std::string& id : std::vector<std::string>{"", "..", ".", "a/b", "../x", std::string(200, 'a'), "j\xff"}) {
    EXPECT_EQ(tensorboard::JobRunWriter::Open(Options(tmp.path(), false), id, {}).status().code(),
              absl::StatusCode::kInvalidArgument)
        << Quote(id);
  }
  const std::string file = tmp.path() + "/plain";
  ASSERT_TRUE(WriteFileAtomically(file, "x").ok());
  absl::Status s = tensorboard::PrepareOutputDir(file, "-o");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("-o '" + file + "': not a directory"), std::string::npos) << s;
  s = tensorboard::PrepareOutputDir(file + "/sub", "--tensorboard-dir");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--tensorboard-dir"), std::string::npos) << s;
  EXPECT_EQ(tensorboard::PrepareOutputDir("", "-o").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(tensorboard::PrepareOutputDir(tmp.path() + "/new/deeper", "-o").ok());
  EXPECT_TRUE(fs::is_directory(tmp.path() + "/new/deeper"));
}

TEST(JobRunWriterTest, AResumedWriterTruncatesUnrecordedBytesAndWritesEachStepOnce) {
  TempDir tmp;
  v1::JobSpec spec;
  {
    auto w = tensorboard::JobRunWriter::Open(Options(tmp.path(), true), "job-1", spec);
    ASSERT_TRUE(w.ok()) << w.status();
    for (int i = 1; i <= 5; ++i) (*w)->Add(Step(i, 1, i, 10.0 - i));
    ASSERT_TRUE((*w)->Flush().ok());
    EXPECT_EQ((*w)->last_seq(), 5);
  }
  // A crash after records 6..7 were appended but before the progress said so, with a
  // torn record at the end.
  const std::string run = tmp.path() + "/job-1/attempt-1";
  const std::string file = fs::directory_iterator(run)->path().string();
  const auto recorded = fs::file_size(file);
  {
    std::string extra;
    AttemptCounters c;
    for (int i = 6; i <= 7; ++i) {
      for (const Event& r : tensorboard::Summarize(Step(i, 1, i, 10.0 - i), &c)) {
        tensorboard::AppendRecord(r.SerializeAsString(), &extra);
      }
    }
    std::ofstream(file, std::ios::app | std::ios::binary) << extra << "torn";
  }
  auto w = tensorboard::JobRunWriter::Open(Options(tmp.path(), true), "job-1", spec);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->last_seq(), 5);
  EXPECT_EQ(fs::file_size(file), recorded) << "cut back to what the progress recorded";
  for (int i = 1; i <= 9; ++i) (*w)->Add(Step(i, 1, i, 10.0 - i));  // the store from seq 1 again
  ASSERT_TRUE((*w)->Flush().ok());
  const std::vector<Event> records = ReadRun(run);
  EXPECT_EQ(LossSteps(records), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  int versions = 0;
  for (const Event& r : records) versions += r.file_version().empty() ? 0 : 1;
  EXPECT_EQ(versions, 1);
}

TEST(JobRunWriterTest, AJobWithNoAttemptGetsNoFolder) {
  TempDir tmp;
  auto w = tensorboard::JobRunWriter::Open(Options(tmp.path(), true), "job-1", {});
  ASSERT_TRUE(w.ok());
  v1::Event pending;
  pending.set_seq(1);
  pending.mutable_job_state()->set_state(v1::Job::CANCELLED);
  (*w)->Add(pending);
  ASSERT_TRUE((*w)->Flush().ok());
  EXPECT_FALSE(fs::exists(tmp.path() + "/job-1"));
  EXPECT_TRUE((*w)->run_dirs().empty());
}

TEST(JobRunWriterTest, AnAttemptWithoutStepMetricsHasOnlyItsSpec) {
  TempDir tmp;
  v1::JobSpec spec;
  spec.mutable_training()->set_steps(7);
  auto w = tensorboard::JobRunWriter::Open(Options(tmp.path(), false), "job-1", spec);
  ASSERT_TRUE(w.ok());
  v1::Event failed;
  failed.set_seq(1);
  failed.set_attempt(1);
  failed.mutable_rank_state()->set_state(v1::RankState::FAILED);
  (*w)->Add(failed);
  ASSERT_TRUE((*w)->Flush().ok());
  const std::vector<Event> records = ReadRun(tmp.path() + "/job-1/attempt-1");
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].file_version(), "brain.Event:2");
  EXPECT_NE(records[1].summary().value(0).tensor().string_val(0).find("\"steps\": 7"), std::string::npos);
}

TEST(JobRunWriterTest, DamagedProgressOrShortFilesAreErrorsNamingThem) {
  TempDir tmp;
  {
    auto w = tensorboard::JobRunWriter::Open(Options(tmp.path(), true), "job-1", {});
    ASSERT_TRUE(w.ok());
    (*w)->Add(Step(1, 1, 1, 1.0));
    ASSERT_TRUE((*w)->Flush().ok());
  }
  const std::string run = tmp.path() + "/job-1/attempt-1";
  const std::string file = fs::directory_iterator(run)->path().string();
  fs::resize_file(file, 10);
  auto w = tensorboard::JobRunWriter::Open(Options(tmp.path(), true), "job-1", {});
  EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(w.status().message().find(file), std::string::npos) << w.status();
  const std::string progress = tmp.path() + "/job-1/.trainyard-tensorboard.json";
  for (const std::string& bad : std::vector<std::string>{
           "", "[]", "{\"version\":1}", "{\"version\":1,\"job\":\"job-2\",\"last_seq\":1,\"attempts\":{}}",
           "{\"version\":1,\"job\":\"job-1\",\"last_seq\":-4,\"attempts\":{}}",
           "{\"version\":1,\"job\":\"job-1\",\"last_seq\":1,\"attempts\":{\"x\":{}}}"}) {
    ASSERT_TRUE(WriteFileAtomically(progress, bad).ok());
    w = tensorboard::JobRunWriter::Open(Options(tmp.path(), true), "job-1", {});
    EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss) << bad << ": " << w.status();
    EXPECT_NE(w.status().message().find(progress), std::string::npos) << w.status();
  }
}

TEST(JobRunWriterTest, ManyEventsStayReadable) {
  TempDir tmp;
  auto w = tensorboard::JobRunWriter::Open(Options(tmp.path(), false), "job-1", {});
  ASSERT_TRUE(w.ok());
  constexpr int kEvents = 50000;
  for (int i = 1; i <= kEvents; ++i) {
    (*w)->Add(Step(i, 1, i, 1.0 / i));
    if (i % 10000 == 0) {
      ASSERT_TRUE((*w)->Flush().ok());
    }
  }
  ASSERT_TRUE((*w)->Flush().ok());
  const std::vector<int64_t> steps = LossSteps(ReadRun(tmp.path() + "/job-1/attempt-1"));
  ASSERT_EQ(steps.size(), static_cast<size_t>(kEvents));
  EXPECT_EQ(steps.back(), kEvents);
}

#ifdef TRAINYARD_TB_PYTHON
// TensorBoard's own reader keeps what the files say: NaN and infinities as stored, a
// double beyond float's range as infinity, and spec text that decodes as strict UTF-8
// (protobuf's JSON printer drops the bytes of a string that are not UTF-8).
TEST(JobRunWriterTest, TensorBoardReadsNanInfinityAndRepairedUtf8AsWritten) {
  TempDir tmp;
  v1::JobSpec spec;
  spec.mutable_job()->set_name(std::string("bad \xff name"));
  auto w = tensorboard::JobRunWriter::Open(Options(tmp.path(), false), "job-1", spec);
  ASSERT_TRUE(w.ok());
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> losses = {std::numeric_limits<double>::quiet_NaN(), inf, -inf, 1e300, 1e-50, 2.5};
  for (size_t i = 0; i < losses.size(); ++i) (*w)->Add(Step(static_cast<int64_t>(i) + 1, 1, i + 1, losses[i]));
  ASSERT_TRUE((*w)->Flush().ok());
  const std::string script =
      "import sys\n"
      "from tensorboard.backend.event_processing import event_accumulator as ea\n"
      "acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})\n"
      "acc.Reload()\n"
      "print(' '.join('%d:%r' % (s.step, s.value) for s in acc.Scalars('train/loss')))\n"
      "text = acc.Tensors('spec')[0].tensor_proto.string_val[0].decode('utf-8')\n"
      "print('dropped' if '\"bad  name\"' in text else 'kept: ' + text)\n";
  const CommandResult r = RunCommand({TRAINYARD_TB_PYTHON, "-c", script, tmp.path() + "/job-1/attempt-1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1:nan 2:inf 3:-inf 4:inf 5:0.0 6:2.5\ndropped\n");
}
#endif

}  // namespace
}  // namespace trainyard::testing
