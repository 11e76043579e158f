// The --policy-file reader: the documented format, and every hostile input refused
// with its FILE:LINE.
#include "server/policy/policy_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kExample[] = R"(# trainyard-controller --policy-file, re-read on SIGHUP
half_life_hours = 12.5          # fair-share usage decay

[defaults]
slots = 2
gpus = 1

[[group]]
name = "research"
slots = 16
gpus = 8
weight = 2.0

[[group]]
name = "ops"

[[owner]]
name = "alice"
group = "research"
slots = 8
gpus = 4

[[owner]]
name = "bob@example.com"
)";

TEST(PolicyFileTest, ReadsTheDocumentedFormat) {
  absl::StatusOr<SharingPolicy> p = ParsePolicyFile(kExample, "p.toml");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->half_life_hours, 12.5);
  EXPECT_EQ(p->defaults.slots, 2);
  EXPECT_EQ(p->defaults.gpus, 1);
  ASSERT_EQ(p->groups.size(), 2u);
  EXPECT_EQ(p->groups[0].name, "research");
  EXPECT_EQ(p->groups[0].limits.slots, 16);
  EXPECT_EQ(p->groups[0].limits.gpus, 8);
  EXPECT_EQ(p->groups[0].weight, 2.0);
  EXPECT_EQ(p->groups[1].name, "ops");
  EXPECT_EQ(p->groups[1].weight, 1.0);
  EXPECT_EQ(p->groups[1].limits.slots, 0);
  ASSERT_EQ(p->owners.size(), 2u);
  EXPECT_EQ(p->owners[0].name, "alice");
  EXPECT_EQ(p->owners[0].group, "research");
  EXPECT_EQ(p->owners[0].limits.slots, 8);
  EXPECT_EQ(p->owners[0].limits.gpus, 4);
  EXPECT_EQ(p->owners[1].name, "bob@example.com");
  EXPECT_EQ(p->owners[1].group, "");
  EXPECT_EQ(p->owners[1].limits.slots, 0) << "a listed owner's absent limit is no limit";
  EXPECT_EQ(p->WeightOf("alice"), 2.0);
}

TEST(PolicyFileTest, AnEmptyFileIsTheDefaultPolicyAndIntegersAreNumbers) {
  absl::StatusOr<SharingPolicy> p = ParsePolicyFile("", "p.toml");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->half_life_hours, 24);
  EXPECT_TRUE(p->groups.empty());
  EXPECT_TRUE(p->owners.empty());
  absl::StatusOr<SharingPolicy> q =
      ParsePolicyFile("half_life_hours = 8760\ngroup = []\n[[owner]]\nname = \"x\"\nslots = 1000000\n", "p.toml");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->half_life_hours, 8760);
  EXPECT_EQ(q->owners.at(0).limits.slots, 1000000);
  absl::StatusOr<SharingPolicy> w = ParsePolicyFile("[[group]]\nname = \"g\"\nweight = 3\n", "p.toml");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->groups.at(0).weight, 3.0);
}

// The error of `text`, which must be INVALID_ARGUMENT.
std::string Err(const std::string& text) {
  absl::StatusOr<SharingPolicy> p = ParsePolicyFile(text, "p.toml");
  if (p.ok()) return "(parsed)";
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
  return std::string(p.status().message());
}

TEST(PolicyFileTest, UnknownKeysAnywhereNameTheKeyAndTheAllowedOnes) {
  EXPECT_EQ(Err("half_life_hours = 1\nhalflife = 2\n"),
            "p.toml:2: unknown key 'halflife' (allowed: half_life_hours, [defaults], [[group]], [[owner]])");
  EXPECT_EQ(Err("[defaults]\nslots = 1\ncpus = 2\n"),
            "p.toml:3: unknown key 'cpus' in [defaults] (allowed: slots, gpus)");
  EXPECT_EQ(Err("[[group]]\nname = \"g\"\nwieght = 2\n"),
            "p.toml:3: unknown key 'wieght' in [[group]] (allowed: name, slots, gpus, weight)");
  EXPECT_EQ(Err("[[owner]]\nname = \"a\"\nweight = 2\n"),
            "p.toml:3: unknown key 'weight' in [[owner]] (allowed: name, group, slots, gpus)");
  EXPECT_EQ(Err("[quota]\nslots = 1\n"),
            "p.toml:1: unknown key 'quota' (allowed: half_life_hours, [defaults], [[group]], [[owner]])");
  EXPECT_EQ(Err("\"evil\\u001b[31m\" = 1\n"),
            "p.toml:1: unknown key 'evil\\x1b[31m' (allowed: half_life_hours, [defaults], [[group]], [[owner]])")
      << "escaped, never echoed raw";
}

TEST(PolicyFileTest, WrongTypesNameTheKeyAndBothTypes) {
  EXPECT_EQ(Err("half_life_hours = \"24\"\n"), "p.toml:1: half_life_hours: expected a number, got string");
  EXPECT_EQ(Err("\n[defaults]\nslots = \"8\"\n"), "p.toml:3: defaults.slots: expected an integer, got string");
  EXPECT_EQ(Err("[[group]]\nname = \"g\"\nslots = 8.0\n"), "p.toml:3: group.slots: expected an integer, got float");
  EXPECT_EQ(Err("[[group]]\nname = \"g\"\nweight = true\n"), "p.toml:3: group.weight: expected a number, got boolean");
  EXPECT_EQ(Err("[[owner]]\nname = 7\n"), "p.toml:2: owner.name: expected a string, got integer");
  EXPECT_EQ(Err("[[owner]]\nname = \"a\"\ngroup = [\"g\"]\n"), "p.toml:3: owner.group: expected a string, got array");
  EXPECT_EQ(Err("defaults = 3\n"), "p.toml:1: defaults: expected a table ([defaults]), got integer");
  EXPECT_EQ(Err("half_life_hours = 1\n[group]\nname = \"g\"\n"),
            "p.toml:2: group: expected an array of tables ([[group]]), got table");
  EXPECT_EQ(Err("owner = [1, 2]\n"),
            "p.toml:1: owner: expected an array of tables ([[owner]]), got an array of values");
}

TEST(PolicyFileTest, NegativeOrAbsurdLimitsAreRefused) {
  EXPECT_EQ(Err("[defaults]\ngpus = -1\n"), "p.toml:2: defaults.gpus: -1 is out of range (0 to 1000000; 0: no limit)");
  EXPECT_EQ(Err("[[owner]]\nname = \"a\"\nslots = 1000001\n"),
            "p.toml:3: owner.slots: 1000001 is out of range (0 to 1000000; 0: no limit)");
  EXPECT_EQ(Err("[[group]]\nname = \"g\"\ngpus = 9223372036854775807\n"),
            "p.toml:3: group.gpus: 9223372036854775807 is out of range (0 to 1000000; 0: no limit)");
}

TEST(PolicyFileTest, HalfLifeMustBePositiveFiniteAndAtMostAYear) {
  EXPECT_EQ(Err("half_life_hours = 0\n"),
            "p.toml:1: half_life_hours: 0 is out of range (finite, more than 0, at most 8760)");
  EXPECT_EQ(Err("half_life_hours = -2.5\n"),
            "p.toml:1: half_life_hours: -2.5 is out of range (finite, more than 0, at most 8760)");
  EXPECT_EQ(Err("half_life_hours = 8761\n"),
            "p.toml:1: half_life_hours: 8761 is out of range (finite, more than 0, at most 8760)");
  EXPECT_EQ(Err("half_life_hours = nan\n"),
            "p.toml:1: half_life_hours: nan is out of range (finite, more than 0, at most 8760)");
  EXPECT_EQ(Err("half_life_hours = inf\n"),
            "p.toml:1: half_life_hours: inf is out of range (finite, more than 0, at most 8760)");
}

TEST(PolicyFileTest, WeightsMustBeFiniteAndPositive) {
  for (const char* bad : {"0", "-1", "0.0", "nan", "inf", "-inf", "1e7"}) {
    EXPECT_THAT(Err(std::string("[[group]]\nname = \"g\"\nweight = ") + bad + "\n"),
                StartsWith("p.toml:3: group.weight: "))
        << bad;
    EXPECT_THAT(Err(std::string("[[group]]\nname = \"g\"\nweight = ") + bad + "\n"),
                HasSubstr("is out of range (finite, more than 0, at most 1000000)"))
        << bad;
  }
}

TEST(PolicyFileTest, NamesMustBeShortPrintableAndPresent) {
  EXPECT_EQ(Err("[[owner]]\nname = \"\"\n"), "p.toml:2: owner.name: must not be empty");
  const std::string long_name(65, 'a');
  EXPECT_EQ(Err("[[owner]]\nname = \"" + long_name + "\"\n"),
            "p.toml:2: owner.name: '" + long_name + "' is 65 bytes, more than 64");
  EXPECT_TRUE(ParsePolicyFile("[[owner]]\nname = \"" + std::string(64, 'a') + "\"\n", "p.toml").ok());
  EXPECT_EQ(Err("[[group]]\nname = \"a b\"\n"), "p.toml:2: group.name: 'a b' must be printable ASCII without spaces");
  EXPECT_EQ(Err("[[owner]]\nname = \"a\\tb\"\n"),
            "p.toml:2: owner.name: 'a\\x09b' must be printable ASCII without spaces");
  EXPECT_EQ(Err("[[owner]]\nname = \"\xc3\xa9\"\n"),
            "p.toml:2: owner.name: '\\xc3\\xa9' must be printable ASCII without spaces");
  EXPECT_EQ(Err("[[owner]]\nname = \"a\"\ngroup = \"\"\n"), "p.toml:3: owner.group: must not be empty");
  EXPECT_EQ(Err("\n[[owner]]\nslots = 1\n"), "p.toml:2: [[owner]] has no name");
  EXPECT_EQ(Err("[[group]]\nname = \"g\"\n\n[[group]]\ngpus = 1\n"), "p.toml:4: [[group]] has no name");
}

TEST(PolicyFileTest, DuplicateNamesNameTheFirstLine) {
  EXPECT_EQ(Err("[[owner]]\nname = \"alice\"\n\n[[owner]]\nname = \"bob\"\n\n[[owner]]\nname = \"alice\"\n"),
            "p.toml:8: duplicate owner 'alice' (first at line 2)");
  EXPECT_EQ(Err("[[group]]\nname = \"g\"\n[[group]]\nname = \"g\"\n"),
            "p.toml:4: duplicate group 'g' (first at line 2)");
  // An owner and a group may share a name.
  EXPECT_TRUE(ParsePolicyFile("[[group]]\nname = \"x\"\n[[owner]]\nname = \"x\"\n", "p.toml").ok());
}

TEST(PolicyFileTest, AnOwnerMustNameADeclaredGroup) {
  EXPECT_EQ(Err("[[group]]\nname = \"research\"\n[[owner]]\nname = \"alice\"\ngroup = \"resarch\"\n"),
            "p.toml:5: owner 'alice': group 'resarch' is not a [[group]] of this file");
  // Declared after the owner is fine.
  EXPECT_TRUE(ParsePolicyFile("[[owner]]\nname = \"a\"\ngroup = \"g\"\n[[group]]\nname = \"g\"\n", "p.toml").ok());
}

TEST(PolicyFileTest, InvalidUtf8NamesItsLine) {
  EXPECT_EQ(Err("half_life_hours = 1\n# fine: \xc3\xa9\n# bad: \xc3(\n"), "p.toml:3: not valid UTF-8");
  EXPECT_EQ(Err("\xff"), "p.toml:1: not valid UTF-8");
  EXPECT_EQ(Err("a = 1\n\n\n\"\xed\xa0\x80\" = 2\n"), "p.toml:4: not valid UTF-8") << "a surrogate";
}

TEST(PolicyFileTest, ATextOverTheCapNamesItsSizeAndTheCap) {
  std::string big = "# " + std::string(kMaxPolicyFileBytes - 3, 'x') + "\n";
  ASSERT_EQ(big.size(), kMaxPolicyFileBytes);
  EXPECT_TRUE(ParsePolicyFile(big, "p.toml").ok()) << "exactly the cap";
  big += "\n";
  EXPECT_EQ(Err(big), "p.toml:1: the policy file is 1048577 bytes, more than the cap of 1048576");
}

TEST(PolicyFileTest, SyntaxErrorsCarryTomlsLine) {
  EXPECT_THAT(Err("half_life_hours = 1\nslots =\n"), StartsWith("p.toml:2: syntax error: "));
  EXPECT_THAT(Err("[defaults]\nslots = 1\nslots = 2\n"), StartsWith("p.toml:3: syntax error: "));
  EXPECT_THAT(Err("\n\nname = \"a\x01\"\n"), StartsWith("p.toml:3: syntax error: "));
  EXPECT_THAT(Err("[defaults]\n[defaults]\n"), StartsWith("p.toml:2: syntax error: "));
}

TEST(PolicyFileTest, TheEarliestOfSeveralProblemsIsReportedWithACount) {
  // toml++ iterates keys in name order: "zzz" (line 1) comes after "group" (line 3).
  EXPECT_EQ(Err("zzz = 1\n[[group]]\nname = \"\"\nslots = -1\n"),
            "p.toml:1: unknown key 'zzz' (allowed: half_life_hours, [defaults], [[group]], [[owner]]) (and 2 more "
            "problems)");
  EXPECT_EQ(Err("[[group]]\nname = \"g\"\nslots = -1\ngpus = -1\n"),
            "p.toml:3: group.slots: -1 is out of range (0 to 1000000; 0: no limit) (and 1 more problem)");
}

TEST(PolicyFileTest, LoadReadsTheFileAndNamesItsPath) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/policy_file_test.toml";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << kExample;
  }
  absl::StatusOr<SharingPolicy> p = LoadPolicyFile(path);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->owners.size(), 2u);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << "[[owner]]\nname = \"a\"\ngroup = \"nope\"\n";
  }
  EXPECT_EQ(LoadPolicyFile(path).status().message(),
            path + ":3: owner 'a': group 'nope' is not a [[group]] of this file");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << std::string(kMaxPolicyFileBytes + 10, '#');
  }
  absl::Status big = LoadPolicyFile(path).status();
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(big.message(), path + ":1: the policy file is 1048586 bytes, more than the cap of 1048576");
  std::remove(path.c_str());
  absl::Status missing = LoadPolicyFile(path).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()), StartsWith("policy file '" + path + "': "));
}

}  // namespace
}  // namespace trainyard
