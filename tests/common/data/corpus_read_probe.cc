// corpus_read_probe: opens a corpus and reads samples as the engine does (windows of
// seq_len+1 tokens at sample starts, in a shuffled order spread over the whole corpus),
// then prints what it cost: ns per sample and the process's VmRSS / VmHWM. A separate
// process so the memory figures are the reader's alone (corpus_memory_test.cc); also
// the figure-printing bench of docs/data.md.
//
//   corpus_read_probe KIND PATH_LIST VOCAB SEQ_LEN SAMPLES
//   -> "samples=S seq_len=T ns_per_sample=X vm_rss_kb=R vm_hwm_kb=H checksum=C"
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/data/sample_order.h"
#include "common/data/token_corpus.h"

namespace {

long StatusKb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::strtol(line.c_str() + field.size() + 1, nullptr, 10);
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: corpus_read_probe KIND PATH_LIST VOCAB SEQ_LEN SAMPLES\n");
    return 2;
  }
  trainyard::data::CorpusOptions o;
  o.kind = argv[1];
  o.path_list = argv[2];
  o.vocab_size = std::atoll(argv[3]);
  o.key = "training.dataset_path";
  const std::int64_t seq_len = std::atoll(argv[4]);
  const std::int64_t samples = std::atoll(argv[5]);
  auto corpus = trainyard::data::TokenCorpus::Open(o);
  if (!corpus.ok()) {
    std::fprintf(stderr, "%s\n", std::string(corpus.status().message()).c_str());
    return 1;
  }
  const std::int64_t n = ((*corpus)->total_tokens() - 1) / seq_len;
  if (n < 1) {
    std::fprintf(stderr, "fewer tokens than one sample\n");
    return 1;
  }
  const trainyard::data::SampleOrder order(n, /*shuffle=*/true, 1);
  std::vector<std::int64_t> sample(static_cast<std::size_t>(seq_len + 1));
  std::uint64_t checksum = 0;
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t g = 0; g < samples; ++g) {
    const absl::Status s = (*corpus)->Read(order.SampleOf(g) * seq_len, seq_len + 1, sample.data());
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 1;
    }
    checksum += static_cast<std::uint64_t>(sample[static_cast<std::size_t>(g % (seq_len + 1))]);
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  std::printf("samples=%lld seq_len=%lld ns_per_sample=%.0f vm_rss_kb=%ld vm_hwm_kb=%ld checksum=%llu\n",
              static_cast<long long>(samples), static_cast<long long>(seq_len), ns / static_cast<double>(samples),
              StatusKb("VmRSS"), StatusKb("VmHWM"), static_cast<unsigned long long>(checksum));
  return 0;
}
