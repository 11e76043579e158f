// Sweeps at the spec level: --sweep flags and the [sweep] table, the count of points
// and its limit, the expansion's order, names, labels and typed values, and every
// hostile input refused with a precise error and no points.
#include "common/spec/sweep.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/spec/job_file_reader.h"
#include "common/spec/presets.h"
#include "common/spec/sweep_reader.h"
#include "common/spec/toml_reader.h"

namespace trainyard::spec {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Result<SweepJob> FromFlags(std::vector<std::string> sweeps, std::vector<std::string> sets = {},
                           std::optional<std::int64_t> max_concurrent = std::nullopt) {
  SweepFlags flags;
  flags.sweeps = std::move(sweeps);
  flags.max_concurrent = max_concurrent;
  return ParseSweepJobText("", "job.toml", sets, flags);
}

Result<std::vector<SweepPoint>> Expand(const Result<SweepJob>& job, std::size_t max_points = kDefaultMaxSweepPoints) {
  if (!job.ok()) return job.error();
  return ExpandSweep(job.value().base, job.value().sweep, max_points);
}

// The error of reading the flags, or of expanding them when they read.
std::string FlagError(std::vector<std::string> sweeps, std::vector<std::string> sets = {},
                      std::optional<std::int64_t> max_concurrent = std::nullopt) {
  Result<std::vector<SweepPoint>> r = Expand(FromFlags(std::move(sweeps), std::move(sets), max_concurrent));
  return r.ok() ? "(no error)" : r.error().ToString();
}

std::string TomlError(const std::string& text, std::vector<std::string> sweeps = {}) {
  SweepFlags flags;
  flags.sweeps = std::move(sweeps);
  Result<std::vector<SweepPoint>> r = Expand(ParseSweepJobText(text, "job.toml", {}, flags));
  return r.ok() ? "(no error)" : r.error().ToString();
}

TEST(SweepExpandTest, CartesianOrderFirstAxisSlowestWithNamesLabelsAndValues) {
  SweepFlags flags;
  flags.sweeps = {"training.lr=1e-4,3e-4,1e-3", "model.top_k=2,4"};
  Result<SweepJob> job = ParseSweepJobText("[job]\nname = \"moe\"\n[training]\nsteps = 20\n", "job.toml", {}, flags);
  ASSERT_TRUE(job.ok()) << job.error().ToString();
  Result<std::vector<SweepPoint>> r = ExpandSweep(job.value().base, job.value().sweep);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  const std::vector<SweepPoint>& p = r.value();
  ASSERT_EQ(p.size(), 6u);
  const double lrs[] = {1e-4, 1e-4, 3e-4, 3e-4, 1e-3, 1e-3};
  const int top_ks[] = {2, 4, 2, 4, 2, 4};
  for (std::size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i].index, i);
    EXPECT_EQ(p[i].name, "moe-" + std::to_string(i));
    EXPECT_EQ(p[i].spec.job.name, p[i].name);
    EXPECT_DOUBLE_EQ(p[i].spec.training.lr, lrs[i]);
    EXPECT_EQ(p[i].spec.model.top_k, top_ks[i]);
    EXPECT_EQ(p[i].spec.training.steps, 20);         // the base's keys stay
    EXPECT_EQ(p[i].spec.model.n_routed_experts, 8);  // and the preset fills the rest
    EXPECT_EQ(std::get<double>(p[i].values[0]), lrs[i]);
    EXPECT_EQ(std::get<int>(p[i].values[1]), top_ks[i]);
    // The child as submitted: given keys only, the swept ones with the flag as origin.
    const Assignment* lr = p[i].input.Find("training", "lr");
    ASSERT_NE(lr, nullptr);
    EXPECT_EQ(std::get<double>(lr->value), lrs[i]);
    EXPECT_EQ(lr->origin, "--sweep training.lr");
    EXPECT_EQ(p[i].input.Find("model", "n_routed_experts"), nullptr);
  }
  EXPECT_EQ(p[0].label, "lr=0.0001,top_k=2");
  EXPECT_EQ(p[3].label, "lr=0.0003,top_k=4");
  EXPECT_EQ(p[5].label, "lr=0.001,top_k=4");
  EXPECT_EQ(job.value().sweep.max_concurrent, 0);
}

TEST(SweepExpandTest, ValuesAreTypedByTheirKey) {
  Result<SweepJob> job = FromFlags({"training.lr=1", "training.seed=7,18446744073709551", "model.route_norm=true,false",
                                    "model.score_func=softmax,\"sigmoid\"", "training.dataset_path=\"\""},
                                   {}, 3);
  ASSERT_TRUE(job.ok()) << job.error().ToString();
  const Sweep& s = job.value().sweep;
  ASSERT_EQ(s.axes.size(), 5u);
  EXPECT_EQ(std::get<double>(s.axes[0].values[0]), 1.0);  // an integer for a float key
  EXPECT_EQ(std::get<std::uint64_t>(s.axes[1].values[1]), 18446744073709551u);
  EXPECT_THAT(s.axes[2].values, ElementsAre(FieldValue{true}, FieldValue{false}));
  EXPECT_THAT(s.axes[3].values, ElementsAre(FieldValue{std::string("softmax")}, FieldValue{std::string("sigmoid")}));
  EXPECT_THAT(s.axes[4].values, ElementsAre(FieldValue{std::string()}));  // "" is an empty string
  EXPECT_EQ(s.max_concurrent, 3);
  Result<std::vector<SweepPoint>> r = ExpandSweep(job.value().base, s);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  ASSERT_EQ(r.value().size(), 8u);
  const SweepPoint& last = r.value().back();
  EXPECT_EQ(last.spec.training.seed, 18446744073709551u);
  EXPECT_FALSE(last.spec.model.route_norm);
  EXPECT_EQ(last.spec.model.score_func, "sigmoid");
  EXPECT_EQ(last.label, "lr=1,seed=18446744073709551,route_norm=false,score_func=\"sigmoid\",dataset_path=\"\"");
  EXPECT_EQ(r.value()[0].name, "job-0");  // the default job.name
}

TEST(SweepExpandTest, CommasInsideQuotedStringsDoNotSplit) {
  Result<SweepJob> job =
      FromFlags({"training.dataset_path=\"/d/a.txt,/d/b.txt\",'/d/c.txt', /d/e.txt", "training.dataset=text"});
  ASSERT_TRUE(job.ok()) << job.error().ToString();
  EXPECT_THAT(job.value().sweep.axes[0].values,
              ElementsAre(FieldValue{std::string("/d/a.txt,/d/b.txt")}, FieldValue{std::string("/d/c.txt")},
                          FieldValue{std::string("/d/e.txt")}));
  // An escaped quote stays inside a basic string; a literal string has no escapes.
  Result<SweepJob> escaped = FromFlags({R"(training.dataset_path="/d/a\",b",'/d/c\',/d/e)"});
  ASSERT_TRUE(escaped.ok()) << escaped.error().ToString();
  EXPECT_THAT(escaped.value().sweep.axes[0].values,
              ElementsAre(FieldValue{std::string("/d/a\",b")}, FieldValue{std::string("/d/c\\")},
                          FieldValue{std::string("/d/e")}));
}

TEST(SweepExpandTest, LabelsUseSectionKeyWhenTwoAxesShareAKeyName) {
  Result<std::vector<SweepPoint>> r =
      Expand(FromFlags({"training.steps=100,200", "validation.steps=2", "training.lr=1e-3"}));
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r.value()[1].label, "training.steps=200,validation.steps=2,lr=0.001");
  EXPECT_EQ(r.value()[1].spec.training.steps, 200);
  EXPECT_EQ(r.value()[1].spec.validation.steps, 2);
}

TEST(SweepExpandTest, NoSweepIsAnOrdinaryJob) {
  Result<SweepJob> job = ParseSweepJobText("[training]\nsteps = 5\n", "job.toml", {"training.lr=1e-3"}, SweepFlags{});
  ASSERT_TRUE(job.ok()) << job.error().ToString();
  EXPECT_TRUE(job.value().sweep.axes.empty());
  EXPECT_EQ(std::get<int>(job.value().base.Find("training", "steps")->value), 5);
  EXPECT_DOUBLE_EQ(std::get<double>(job.value().base.Find("training", "lr")->value), 1e-3);
  // Expanding it is refused: a sweep has at least one axis.
  EXPECT_EQ(ExpandSweep(job.value().base, job.value().sweep).error().ToString(),
            "a sweep needs at least one swept key");
}

TEST(SweepExpandTest, JsonJobFilesTakeFlags) {
  SweepFlags flags;
  flags.sweeps = {"model.top_k=1,2"};
  Result<SweepJob> job = ParseSweepJobText(R"({"training": {"steps": 7}})", "job.json", {}, flags);
  ASSERT_TRUE(job.ok()) << job.error().ToString();
  Result<std::vector<SweepPoint>> r = ExpandSweep(job.value().base, job.value().sweep);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r.value()[1].spec.model.top_k, 2);
  EXPECT_EQ(r.value()[1].spec.training.steps, 7);
}

TEST(SweepExpandTest, AxesBuiltDirectlyExpandTheSame) {
  // The controller's path: axes from typed values rather than flag text.
  Sweep sweep;
  Result<const FieldInfo*> f = SweepableField("model", "n_routed_experts", "sweep.model.n_routed_experts", "");
  ASSERT_TRUE(f.ok());
  ASSERT_FALSE(AddSweepAxis(sweep, *f.value(),
                            {RawValue{std::int64_t{4}, std::nullopt}, RawValue{std::int64_t{16}, std::nullopt}},
                            "sweep.model.n_routed_experts", "")
                   .has_value());
  Result<std::vector<SweepPoint>> r = ExpandSweep(SpecInput(), sweep);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r.value()[0].spec.model.n_routed_experts, 4);
  EXPECT_EQ(r.value()[1].spec.model.n_routed_experts, 16);
  EXPECT_EQ(r.value()[1].input.OriginOf("model.n_routed_experts"), "sweep.model.n_routed_experts");
  // A key that may not be swept is refused however its FieldInfo was found.
  std::optional<SpecError> name =
      AddSweepAxis(sweep, *FindField("job", "name"), {RawValue{std::string("a"), std::nullopt}}, "axis", "");
  ASSERT_TRUE(name.has_value());
  EXPECT_EQ(name->rule, "not_sweepable");
  EXPECT_EQ(sweep.axes.size(), 1u);  // nothing appended
  // A caller's own copy of the field is the same key: a duplicate, and the axis keeps
  // the schema's entry, not a pointer into the caller's storage.
  const FieldInfo copy = *f.value();
  std::optional<SpecError> again = AddSweepAxis(sweep, copy, {RawValue{std::int64_t{8}, std::nullopt}}, "copy", "");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->rule, "duplicate");
  Sweep fresh;
  ASSERT_FALSE(AddSweepAxis(fresh, copy, {RawValue{std::int64_t{8}, std::nullopt}}, "copy", "").has_value());
  EXPECT_EQ(fresh.axes[0].field, f.value());
}

TEST(SweepTableTest, AxesInFileOrderThenFlags) {
  if (!HaveToml()) GTEST_SKIP() << "this build reads no TOML";
  // toml++ iterates keys by name (model < training); the axes follow the file.
  const std::string text =
      "[job]\nname = \"grid\"\n"
      "[sweep]\n"
      "max_concurrent = 2\n"
      "training.lr = [1e-4, 3e-4]\n"
      "model.top_k = [2, 4]\n";
  SweepFlags flags;
  flags.sweeps = {"training.seed=1,2"};
  Result<SweepJob> job = ParseSweepJobText(text, "job.toml", {}, flags);
  ASSERT_TRUE(job.ok()) << job.error().ToString();
  const Sweep& s = job.value().sweep;
  ASSERT_EQ(s.axes.size(), 3u);
  EXPECT_EQ(s.axes[0].field->path(), "training.lr");
  EXPECT_EQ(s.axes[0].origin, "job.toml:5:10");
  EXPECT_EQ(s.axes[1].field->path(), "model.top_k");
  EXPECT_EQ(s.axes[2].field->path(), "training.seed");
  EXPECT_EQ(s.max_concurrent, 2);
  Result<std::vector<SweepPoint>> r = ExpandSweep(job.value().base, s);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  ASSERT_EQ(r.value().size(), 8u);
  EXPECT_EQ(r.value()[5].name, "grid-5");
  EXPECT_EQ(r.value()[5].label, "lr=0.0003,top_k=2,seed=2");
  EXPECT_EQ(r.value()[5].input.OriginOf("training.lr"), "job.toml:5:10");
  // --max-concurrent wins over the table's.
  flags.max_concurrent = 5;
  EXPECT_EQ(ParseSweepJobText(text, "job.toml", {}, flags).value().sweep.max_concurrent, 5);
}

TEST(SweepTableTest, SubTableFormIsTheSameTable) {
  if (!HaveToml()) GTEST_SKIP() << "this build reads no TOML";
  Result<SweepJob> job = ParseSweepJobText(
      "[sweep.model]\nscore_func = [\"softmax\", \"sigmoid\"]\n[sweep.training]\nshuffle = [true, false]\n", "job.toml",
      {}, SweepFlags{});
  ASSERT_TRUE(job.ok()) << job.error().ToString();
  const Sweep& s = job.value().sweep;
  ASSERT_EQ(s.axes.size(), 2u);
  EXPECT_THAT(s.axes[0].values, ElementsAre(FieldValue{std::string("softmax")}, FieldValue{std::string("sigmoid")}));
  EXPECT_THAT(s.axes[1].values, ElementsAre(FieldValue{true}, FieldValue{false}));
  EXPECT_EQ(s.axes[1].label, "sweep.training.shuffle");
}

TEST(SweepTableTest, ValidationErrorsPointAtTheTableKey) {
  if (!HaveToml()) GTEST_SKIP() << "this build reads no TOML";
  EXPECT_EQ(TomlError("[sweep]\nmodel.n_routed_experts = [8, 4]\nmodel.top_k = [2, 8]\n"),
            "job.toml:3:7: sweep point 3 of 4 (n_routed_experts=4,top_k=8): model.top_k must be in [1, "
            "model.n_routed_experts=4], got 8");
}

TEST(SweepTableTest, OnlyTheSweepReaderSkipsTheTable) {
  if (!HaveToml()) GTEST_SKIP() << "this build reads no TOML";
  // An ordinary job file reader (trainyard submit's today) still refuses [sweep], so a
  // sweep is never run as one job by a reader that does not know it.
  const std::string text = "[training]\nsteps = 5\n[sweep]\ntraining.lr = [1e-4]\n";
  Result<SpecInput> plain = ParseJobText(text, "job.toml");
  ASSERT_FALSE(plain.ok());
  EXPECT_THAT(plain.error().ToString(), HasSubstr("job.toml:3:2: unknown section [sweep]"));
  // Skipped by name only: another unknown table is still refused.
  Result<SpecInput> other = ParseJobText("[swept]\nx = 1\n", "job.toml", {}, "sweep");
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.error().ToString(), HasSubstr("unknown section [swept]"));
  Result<SpecInput> skipped = ParseJobText(text, "job.toml", {}, "sweep");
  ASSERT_TRUE(skipped.ok()) << skipped.error().ToString();
  EXPECT_EQ(skipped.value().assignments().size(), 1u);  // training.steps alone
}

TEST(SweepLimitTest, CountsBeforeReadingAnyValue) {
  std::string thousand_bad;  // 1,000 values, the last one not a number at all
  for (int i = 0; i < 999; ++i) thousand_bad += std::to_string(i) + ",";
  thousand_bad += "abc";
  // 10^6 points: refused by count, so the bad value is never read.
  EXPECT_EQ(FlagError({"training.seed=" + thousand_bad, "training.log_freq=" + thousand_bad}),
            "sweep of 1000000 points (training.seed: 1000 x training.log_freq: 1000 values) is over the limit of "
            "1000 points");
  // 10,000 points: over the default limit.
  std::string hundred;
  for (int i = 1; i <= 100; ++i) hundred += std::to_string(i) + (i < 100 ? "," : "");
  EXPECT_EQ(FlagError({"training.seed=" + hundred, "training.steps=" + hundred}),
            "sweep of 10000 points (training.seed: 100 x training.steps: 100 values) is over the limit of 1000 "
            "points");
  // Two million values in one flag are counted, not kept.
  std::string two_million = "1";
  for (int i = 1; i < 2'000'000; ++i) two_million += ",1";
  EXPECT_EQ(FlagError({"training.seed=" + two_million}),
            "sweep of 2000000 points (training.seed: 2000000 values) is over the limit of 1000 points");
  // Within the limit, the bad value is read and named.
  EXPECT_EQ(FlagError({"training.seed=" + thousand_bad}),
            "--sweep training.seed: value 1000 of 1000 (\"abc\"): expected integer, got string");
}

TEST(SweepLimitTest, ExactlyTheLimitExpandsAndOneMoreIsRefused) {
  std::string ten;
  for (int i = 1; i <= 10; ++i) ten += std::to_string(i) + (i < 10 ? "," : "");
  Result<std::vector<SweepPoint>> r =
      Expand(FromFlags({"training.seed=" + ten, "training.log_freq=" + ten, "training.steps=" + ten}));
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  ASSERT_EQ(r.value().size(), 1000u);
  EXPECT_EQ(r.value()[999].label, "seed=10,log_freq=10,steps=10");
  EXPECT_EQ(r.value()[123].spec.training.seed, 2u);
  EXPECT_EQ(r.value()[123].spec.training.log_freq, 3);
  EXPECT_EQ(r.value()[123].spec.training.steps, 4);
  // The limit is the caller's: 1,000 points against a limit of 999.
  Result<std::vector<SweepPoint>> over =
      Expand(FromFlags({"training.seed=" + ten, "training.log_freq=" + ten, "training.steps=" + ten}), 999);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().rule, "limit");
  EXPECT_THAT(over.error().message, HasSubstr("sweep of 1000 points"));
  EXPECT_THAT(over.error().message, HasSubstr("over the limit of 999 points"));
}

TEST(SweepLimitTest, ProductOverflowIsNamedNotWrapped) {
  const std::size_t big = std::size_t{1} << 40;
  Result<std::size_t> n = CountSweepPoints({{"a.b", big}, {"c.d", big}, {"e.f", 1}}, kDefaultMaxSweepPoints);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.error().message,
            "sweep of more than 18446744073709551615 points (a.b: 1099511627776 x c.d: 1099511627776 x e.f: 1 "
            "values) is over the limit of 1000 points");
  // 2^32 x 2^32 wraps to 0 in 64 bits: still refused.
  Result<std::size_t> wrap =
      CountSweepPoints({{"a.b", std::size_t{1} << 32}, {"c.d", std::size_t{1} << 32}}, kDefaultMaxSweepPoints);
  ASSERT_FALSE(wrap.ok());
  EXPECT_THAT(wrap.error().message, HasSubstr("more than"));
  EXPECT_EQ(CountSweepPoints({{"a.b", 3}, {"c.d", 2}}, 6).value(), 6u);
  EXPECT_EQ(CountSweepPoints({{"a.b", 3}, {"c.d", 0}}, 6).error().message,
            "c.d: no values (a swept key needs at least one)");
}

TEST(SweepHostileTest, FlagErrorsNameTheFlagAndTheKey) {
  struct Bad {
    std::vector<std::string> sweeps;
    const char* error;
  };
  const std::vector<Bad> cases = {
      {{"training.lr"}, "--sweep \"training.lr\": expected section.key=V1,V2,... (e.g. training.lr=1e-4,3e-4)"},
      {{"training=1,2"},
       "--sweep training: training is a section, not a key; sweep one of its keys (expected section.key=V1,V2,... "
       "(e.g. training.lr=1e-4,3e-4))"},
      {{"training.lr.x=1"}, "--sweep training.lr.x: expected section.key=V1,V2,... (e.g. training.lr=1e-4,3e-4)"},
      {{"training.lrr=1"}, "--sweep training.lrr: unknown key training.lrr (did you mean training.lr?)"},
      {{"trainng.lr=1"},
       "--sweep trainng.lr: unknown section [trainng] (did you mean training?) (known: job, model, training, "
       "parallelism, compile, activation_checkpoint, profiling, checkpoint, resources, restart, validation)"},
      {{"job.name=a,b"},
       "--sweep job.name: job.name cannot be swept: it names the sweep, and child i is named <job.name>-i"},
      {{"sweep.max_concurrent=1,2"},
       "--sweep sweep.max_concurrent: the sweep's own settings cannot be swept (sweep.max_concurrent is one "
       "number)"},
      {{"training.lr="}, "--sweep training.lr: no values (a swept key needs at least one)"},
      {{"training.lr=1e-4,,3e-4"}, "--sweep training.lr: value 2 of 3 is empty (write \"\" for an empty string)"},
      {{"training.lr=1e-4,"}, "--sweep training.lr: value 2 of 2 is empty (write \"\" for an empty string)"},
      {{"training.lr=[1e-4,3e-4]"},
       "--sweep training.lr: values are a plain comma list, without brackets (expected section.key=V1,V2,... (e.g. "
       "training.lr=1e-4,3e-4))"},
      {{"training.lr=nan"}, "--sweep training.lr: value 1 of 1 (\"nan\"): expected a finite number, got nan"},
      {{"training.lr=1e-4,-inf"}, "--sweep training.lr: value 2 of 2 (\"-inf\"): expected a finite number, got -inf"},
      {{"model.top_k=2,x"}, "--sweep model.top_k: value 2 of 2 (\"x\"): expected integer, got string"},
      {{"model.top_k=2,3000000000"},
       "--sweep model.top_k: value 2 of 2 (\"3000000000\"): 3000000000 is out of range (must fit in a 32-bit signed "
       "integer, -2147483648 to 2147483647)"},
      {{"model.route_norm=yes"}, "--sweep model.route_norm: value 1 of 1 (\"yes\"): expected boolean, got string"},
      {{"training.lr=1e-4,3e-4,0.0001"}, "--sweep training.lr: value 3 of 3 (0.0001) repeats value 1"},
      {{"model.score_func=\"soft,max"}, "--sweep model.score_func: a quoted value is not closed"},
      {{"training.lr=1e-4", "training.lr=3e-4"},
       "--sweep training.lr: training.lr is swept twice; first by --sweep training.lr"},
  };
  for (const Bad& b : cases) EXPECT_EQ(FlagError(b.sweeps), b.error) << b.sweeps.front();
}

TEST(SweepHostileTest, UnicodeAndNonUtf8Keys) {
  EXPECT_EQ(FlagError({"training.lr\xc3\xa9=1e-4"}),
            "--sweep training.lr\\xc3\\xa9: unknown key training.lr\\xc3\\xa9 (did you mean training.lr?)");
  EXPECT_EQ(FlagError({"\xe8\xae\xad\xe7\xbb\x83.lr=1e-4"}),
            "--sweep \\xe8\\xae\\xad\\xe7\\xbb\\x83.lr: unknown section [\\xe8\\xae\\xad\\xe7\\xbb\\x83] (known: job, "
            "model, training, parallelism, compile, activation_checkpoint, profiling, checkpoint, resources, restart, "
            "validation)");
  EXPECT_EQ(FlagError({"training.l\xff=1e-4"}), "--sweep training.l\\xff: key \"training.l\\xff\" is not valid UTF-8");
  // A non-UTF-8 string value meets the spec's own rule, at its point.
  Result<std::vector<SweepPoint>> r = Expand(FromFlags({"job.priority=1,2", "compile.backend=eager,\xff"}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().rule, "utf8");
  EXPECT_EQ(r.error().ToString(),
            "--sweep compile.backend: sweep point 1 of 4 (priority=1,backend=\"\\xff\"): compile.backend \"\\xff\" "
            "is not valid UTF-8 (and 1 more point fails)");
}

TEST(SweepHostileTest, SetAndMaxConcurrentConflicts) {
  EXPECT_EQ(FlagError({"training.lr=1e-4,3e-4"}, {"training.lr=1e-3"}),
            "--sweep training.lr: training.lr is also given by --set; a key is either set or swept");
  EXPECT_EQ(FlagError({"training.lr=1e-4"}, {}, 0),
            "--max-concurrent: must be 1 to 2147483647 (leave it out for no limit), got 0");
  EXPECT_EQ(FlagError({"training.lr=1e-4"}, {}, -3),
            "--max-concurrent: must be 1 to 2147483647 (leave it out for no limit), got -3");
  EXPECT_EQ(FlagError({"training.lr=1e-4"}, {}, std::int64_t{1} << 40),
            "--max-concurrent: must be 1 to 2147483647 (leave it out for no limit), got 1099511627776");
  EXPECT_EQ(FlagError({}, {}, 2), "--max-concurrent needs a sweep (--sweep section.key=V1,V2 or a [sweep] table)");
  // A --set error is reported as ParseJobText reports it, before the sweep is read.
  EXPECT_EQ(FlagError({"training.lr=x"}, {"training.steps=abc"}), "--set training.steps: expected integer, got string");
}

TEST(SweepHostileTest, TableErrorsNameFileLineAndKey) {
  if (!HaveToml()) GTEST_SKIP() << "this build reads no TOML";
  struct Bad {
    std::string text;
    const char* error;
  };
  const std::vector<Bad> cases = {
      {"sweep = 3\n", "job.toml:1:9: sweep: expected a table ([sweep]), got integer"},
      {"[sweep]\ntraining = [1, 2]\n",
       "job.toml:2:1: sweep.training: training is a section, not a key; sweep its keys (training.KEY = [V1, V2])"},
      {"[sweep]\n\"training.lr\" = [1e-4]\n",
       "job.toml:2:1: sweep.training.lr: a quoted key; write the swept key without quotes (training.lr = [1e-4, "
       "3e-4])"},
      {"[sweep]\nmax_concurent = 2\ntraining.lr = [1e-4]\n",
       "job.toml:2:1: sweep.max_concurent: unknown key (the [sweep] table holds max_concurrent and section.key = "
       "[V1, V2] entries)"},
      {"[sweep]\ntraining.lr = 1e-4\n",
       "job.toml:2:10: sweep.training.lr: expected an array of values (lr = [V1, V2]), got float"},
      {"[sweep.training.lr]\nx = 1\n",
       "job.toml:1:17: sweep.training.lr: expected an array of values (lr = [V1, V2]), got table"},
      {"[sweep]\ntraining.lr = []\n", "job.toml:2:10: sweep.training.lr: no values (a swept key needs at least one)"},
      {"[sweep]\ntraining.lr = [1e-4, [3e-4]]\n",
       "job.toml:2:10: sweep.training.lr: value 2 of 2: expected float, got array"},
      {"[sweep]\ntraining.lr = [1e-4, nan]\n",
       "job.toml:2:10: sweep.training.lr: value 2 of 2 (nan): expected a finite number, got nan"},
      {"[sweep]\nmodel.top_k = [2, \"4\"]\n",
       "job.toml:2:7: sweep.model.top_k: value 2 of 2 (\"4\"): expected integer, got string"},
      {"[sweep]\njob.name = [\"a\", \"b\"]\n",
       "job.toml:2:5: sweep.job.name: job.name cannot be swept: it names the sweep, and child i is named "
       "<job.name>-i"},
      {"[sweep]\ntraining.lrr = [1]\n",
       "job.toml:2:10: sweep.training.lrr: unknown key training.lrr (did you mean training.lr?)"},
      {"[sweep]\nmax_concurrent = \"2\"\ntraining.lr = [1e-4]\n",
       "job.toml:2:1: sweep.max_concurrent: expected integer, got string"},
      {"[sweep]\nmax_concurrent = 0\ntraining.lr = [1e-4]\n",
       "job.toml:2:1: sweep.max_concurrent: must be 1 to 2147483647 (leave it out for no limit), got 0"},
      {"[sweep]\nmax_concurrent = 2\n", "job.toml: the [sweep] table sweeps no key (add section.key = [V1, V2])"},
      // The earliest problem in the file, whatever toml++'s key order.
      {"[sweep]\ntraining.zz = [1]\nmodel.zz = [1]\n",
       "job.toml:2:10: sweep.training.zz: unknown key training.zz (did you mean training.lr?)"},
  };
  for (const Bad& b : cases) EXPECT_EQ(TomlError(b.text), b.error) << b.text;
  // The same key in the table and a flag.
  EXPECT_EQ(TomlError("[sweep]\ntraining.lr = [1e-4, 3e-4]\n", {"training.lr=1e-3"}),
            "--sweep training.lr: training.lr is swept twice; first by job.toml:2:10 (sweep.training.lr)");
  // The same key twice in the table is TOML's own error, from the job file's reader.
  EXPECT_THAT(TomlError("[sweep]\ntraining.lr = [1e-4]\ntraining.lr = [3e-4]\n"), HasSubstr("job.toml:3:"));
}

TEST(SweepValidationTest, EveryPointIsValidatedAndTheFirstFailureNamed) {
  // lr = -1 breaks training.lr's range at points 2 and 3 (of 0..5).
  EXPECT_EQ(FlagError({"training.lr=1e-4,-1,1e-3", "model.top_k=2,4"}),
            "--sweep training.lr: sweep point 2 of 6 (lr=-1,top_k=2): training.lr must be in (0, 10], got -1 (and 1 "
            "more point fails)");
  // top_k above the preset's 8 experts, at point 1 only.
  EXPECT_EQ(FlagError({"model.top_k=2,16"}),
            "--sweep model.top_k: sweep point 1 of 2 (top_k=16): model.top_k must be in [1, "
            "model.n_routed_experts=8], got 16");
  // A cross-key rule between two swept keys: top_k 8 with 4 experts only.
  EXPECT_EQ(FlagError({"model.n_routed_experts=8,4", "model.top_k=2,8"}),
            "--sweep model.top_k: sweep point 3 of 4 (n_routed_experts=4,top_k=8): model.top_k must be in [1, "
            "model.n_routed_experts=4], got 8");
  // A base that no point can fix fails every point; the origin is the base's key.
  SweepFlags flags;
  flags.sweeps = {"model.top_k=1,2,4"};
  Result<SweepJob> job = ParseSweepJobText("[training]\nsteps = 0\n", "job.toml", {}, flags);
  ASSERT_TRUE(job.ok());
  Result<std::vector<SweepPoint>> r = ExpandSweep(job.value().base, job.value().sweep);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().ToString(), HasSubstr("job.toml:2:9: sweep point 0 of 3 (top_k=1): training.steps"));
  EXPECT_THAT(r.error().ToString(), HasSubstr("(and 2 more points fail)"));
}

TEST(SweepValidationTest, ChildNamesMustFitTheNameLimit) {
  // Children of 1,000 points are named up to <name>-999: 125 + 1 + 3 characters.
  const std::string name(125, 'n');
  SweepFlags flags;
  std::string values;
  for (int i = 1; i <= 1000; ++i) values += std::to_string(i) + (i < 1000 ? "," : "");
  flags.sweeps = {"training.seed=" + values};
  Result<SweepJob> job = ParseSweepJobText("", "job.toml", {"job.name=" + name}, flags);
  ASSERT_TRUE(job.ok()) << job.error().ToString();
  Result<std::vector<SweepPoint>> r = ExpandSweep(job.value().base, job.value().sweep);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "job.name");
  EXPECT_EQ(r.error().rule, "length");
  EXPECT_THAT(r.error().ToString(),
              HasSubstr("is too long for a sweep of 1000 points: its children are named <job.name>-<index>, up to "
                        "129 characters, over the limit of 128"));
  EXPECT_EQ(r.error().origin, "--set " + Quote("job.name=" + name));  // where the name came from
  flags.sweeps = {"training.seed=1,2,3"};
  Result<std::vector<SweepPoint>> fits = Expand(ParseSweepJobText("", "job.toml", {"job.name=" + name}, flags));
  ASSERT_TRUE(fits.ok()) << fits.error().ToString();
  EXPECT_EQ(fits.value()[2].name, name + "-2");
}

}  // namespace
}  // namespace trainyard::spec

namespace trainyard::spec {
namespace {

// What the CLI sends (each typed value written with ToText) reads back, in the
// controller, as the very same axes: the wire loses nothing of a value's type.
TEST(SweepFromTextTest, TheWireFormOfEveryAxisReadsBackAsTheSameTypedValues) {
  Result<SweepJob> job = FromFlags(
      {"training.lr=1e-4,3e-4,1", "model.top_k=2,4", "training.shuffle=true,false", "model.score_func=softmax,sigmoid",
       "training.dataset_path=\"/d/a,b.txt\",\"/d/\\\"q\\\".txt\",/d/é.txt"},
      {}, 3);
  ASSERT_TRUE(job.ok()) << job.error().ToString();
  std::vector<SweepAxisText> wire;
  for (const SweepAxis& a : job.value().sweep.axes) {
    SweepAxisText text{a.field->path(), {}};
    for (const FieldValue& v : a.values) text.values.push_back(SweepValueText(v));
    wire.push_back(std::move(text));
  }
  EXPECT_THAT(wire[0].values, ElementsAre("0.0001", "0.0003", "1"));
  EXPECT_EQ(wire[4].values[2], "\"/d/\xc3\xa9.txt\"") << "UTF-8 kept as is";
  Result<Sweep> back = SweepFromText(wire, 3);
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  ASSERT_EQ(back.value().axes.size(), job.value().sweep.axes.size());
  for (size_t a = 0; a < wire.size(); ++a) {
    EXPECT_EQ(back.value().axes[a].field, job.value().sweep.axes[a].field);
    EXPECT_EQ(back.value().axes[a].values, job.value().sweep.axes[a].values) << wire[a].key;
  }
  EXPECT_EQ(back.value().max_concurrent, 3);
  EXPECT_EQ(std::get<std::string>(back.value().axes[4].values[1]), "/d/\"q\".txt");
}

TEST(SweepFromTextTest, HostileRequestsAreRefusedPrecisely) {
  auto error = [](std::vector<SweepAxisText> axes, std::int64_t max_concurrent = 0) {
    Result<Sweep> s = SweepFromText(axes, max_concurrent);
    EXPECT_FALSE(s.ok());
    return s.ok() ? std::string() : s.error().message;
  };
  EXPECT_THAT(error({}), HasSubstr("at least one swept key"));
  EXPECT_THAT(error({{"lr", {"1"}}}), HasSubstr("axis lr: the key must be section.key"));
  EXPECT_THAT(error({{".lr", {"1"}}}), HasSubstr("must be section.key"));
  EXPECT_THAT(error({{"training.", {"1"}}}), HasSubstr("must be section.key"));
  EXPECT_THAT(error({{"training.lrr", {"1"}}}), HasSubstr("did you mean training.lr"));
  EXPECT_THAT(error({{"training.lr\xff", {"1"}}}), HasSubstr("not valid UTF-8"));
  EXPECT_THAT(error({{"sweep.max_concurrent", {"1"}}}), HasSubstr("cannot be swept"));
  EXPECT_THAT(error({{"training.lr", {"1e-4", ""}}}), HasSubstr("axis training.lr: value 2 of 2 is empty"));
  EXPECT_THAT(error({{"training.lr", {"inf"}}}), HasSubstr("training.lr"));
  EXPECT_THAT(error({{"model.top_k", {"2", "99999999999"}}}), HasSubstr("model.top_k"));
  EXPECT_THAT(error({{"model.top_k", {"2.5"}}}), HasSubstr("model.top_k"));
  EXPECT_THAT(error({{"training.lr", {"1e-4"}}}, -2), HasSubstr("max_concurrent: must be 1 to"));
  EXPECT_THAT(error({{"training.lr", {"1e-4"}}}, std::int64_t{1} << 40), HasSubstr("max_concurrent"));
  // 10^6 points: refused from the counts, naming both.
  std::vector<std::string> thousand(1000, "");  // never read: the count refuses first
  EXPECT_THAT(error({{"training.seed", thousand}, {"training.log_freq", thousand}}),
              HasSubstr("sweep of 1000000 points (training.seed: 1000 x training.log_freq: 1000 values) is over the "
                        "limit of 1000 points"));
  // A key that is neither UTF-8 nor short is named by its position, not echoed raw.
  EXPECT_THAT(error({{std::string(300, 'x'), {"1"}}}), HasSubstr("axis 1: the key must be section.key"));
}

}  // namespace
}  // namespace trainyard::spec
