// The corpus never holds its tokens: the same sample reads over a 2 GiB+ token file and
// over a 10 MiB one (each in a fresh corpus_read_probe process) peak within 200 MiB of
// each other in resident memory, for a flat file and for a Megatron indexed dataset.
// The big files are sparse (ftruncate / truncate): zeros are valid tokens and cost no
// disk. Prints both figures and the read cost per sample (not asserted).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "tests/common/data/data_test_util.h"

namespace trainyard::data {
namespace {

constexpr std::int64_t kSeqLen = 256;  // the debug preset's training.seq_len
constexpr int kSamples = 20000;
constexpr long kSlackKb = 200 * 1024;

struct Probe {
  long rss_kb = -1;
  long hwm_kb = -1;
  double ns_per_sample = -1;
  std::string line;
};

Probe RunProbe(const std::string& kind, const std::string& path) {
  const std::string cmd = std::string(TRAINYARD_CORPUS_PROBE) + " " + kind + " '" + path + "' 2048 " +
                          std::to_string(kSeqLen) + " " + std::to_string(kSamples);
  Probe p;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return p;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), f) != nullptr) p.line += buf;
  const int rc = ::pclose(f);
  EXPECT_EQ(rc, 0) << cmd << ": " << p.line;
  std::sscanf(p.line.c_str(), "samples=%*d seq_len=%*d ns_per_sample=%lf vm_rss_kb=%ld vm_hwm_kb=%ld",
              &p.ns_per_sample, &p.rss_kb, &p.hwm_kb);
  return p;
}

void Sparse(const std::string& path, off_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::ftruncate(fd, bytes), 0) << path;
  ::close(fd);
}

void Compare(const char* what, const Probe& small, const Probe& big) {
  std::printf("%s: 10 MiB corpus VmRSS %ld kB VmHWM %ld kB (%.0f ns/sample); 2 GiB+ corpus VmRSS %ld kB VmHWM %ld kB "
              "(%.0f ns/sample); %d samples of seq_len+1 = %lld tokens\n",
              what, small.rss_kb, small.hwm_kb, small.ns_per_sample, big.rss_kb, big.hwm_kb, big.ns_per_sample,
              kSamples, static_cast<long long>(kSeqLen + 1));
  ASSERT_GT(small.hwm_kb, 0) << small.line;
  ASSERT_GT(big.hwm_kb, 0) << big.line;
  EXPECT_LE(big.hwm_kb, small.hwm_kb + kSlackKb);
  EXPECT_LE(big.rss_kb, small.rss_kb + kSlackKb);
}

TEST(CorpusMemoryTest, AFlatFileOfTwoGibIsReadInBoundedMemory) {
  const std::string dir = testing::FreshDir();
  // The small one holds real tokens (its ns/sample is the figure of docs/data.md).
  std::vector<std::uint64_t> values(5 * 1024 * 1024);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = (i * 2654435761u) % 2048;
  testing::WriteBytes(dir + "/small.u16", testing::LittleEndian(values, 2));
  Sparse(dir + "/big.u16", (off_t{1} << 31) + 4096);
  Compare("flat uint16", RunProbe("tokens", dir + "/small.u16"), RunProbe("tokens", dir + "/big.u16"));
  ::unlink((dir + "/big.u16").c_str());
}

TEST(CorpusMemoryTest, AnIndexedDatasetOfTwoGibIsValidatedAndReadInBoundedMemory) {
  const std::string dir = testing::FreshDir();
  testing::WriteIndexed("{\"prefix\": \"" + dir + "/small\", \"dtype\": 8, \"sparse_tokens\": 5242880}");
  testing::WriteIndexed("{\"prefix\": \"" + dir + "/big\", \"dtype\": 8, \"sparse_tokens\": 1075838976}");
  Compare("megatron uint16", RunProbe("tokens", dir + "/small.idx"), RunProbe("tokens", dir + "/big.idx"));
  ::unlink((dir + "/big.bin").c_str());
}

}  // namespace
}  // namespace trainyard::data
