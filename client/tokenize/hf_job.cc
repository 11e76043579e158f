#include "client/tokenize/hf_job.h"

#include <atomic>
#include <cstddef>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace trainyard::tokenize {

absl::Status HfDocumentSpecials(const HfTokenizer& hf, int eos_option, const std::string& name, std::vector<int>* bos,
                                std::vector<int>* eos) {
  if (eos_option == -2) {
    if (hf.bos_ids().empty() && hf.eos_ids().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name,
                       ": its post_processor puts no special token around a text (no TemplateProcessing with one): "
                       "pass --eos none (documents run together) or --eos ID"));
    }
    *bos = hf.bos_ids();
    *eos = hf.eos_ids();
  } else if (eos_option >= hf.vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat("--eos ", eos_option, ": the tokenizer has ", hf.vocab_size(),
                                                   " ids (0..", hf.vocab_size() - 1, ")"));
  } else if (eos_option >= 0) {
    *bos = hf.bos_ids();
    *eos = {eos_option};
  }
  return absl::OkStatus();
}

HfBatchEncoder::HfBatchEncoder(const HfTokenizer* hf, int threads) : threads_(threads) {
  for (int t = 0; t < threads_; ++t) encoders_.push_back(std::make_unique<HfEncoder>(hf));
}

void HfBatchEncoder::Encode(std::vector<PendingSegment>* batch_ptr) {
  std::vector<PendingSegment>& batch = *batch_ptr;
  // Runs: the batch's segments of one document each; only the last may be unfinished.
  std::vector<std::size_t> starts = {0};
  for (std::size_t i = 0; i + 1 < batch.size(); ++i) {
    if (batch[i].segment.ends_document) starts.push_back(i + 1);
  }
  starts.push_back(batch.size());
  std::string left_over;
  std::atomic<std::size_t> next{0};
  RunOnThreads(threads_, [&](int thread) {
    HfEncoder& encoder = *encoders_[thread];
    for (std::size_t run = next++; run + 1 < starts.size(); run = next++) {
      std::string text = run == 0 ? std::move(carry_) : std::string();
      for (std::size_t i = starts[run]; i < starts[run + 1]; ++i) {
        PendingSegment& p = batch[i];
        text += p.segment.text;
        absl::StatusOr<std::size_t> done = encoder.Encode(text, p.segment.ends_document, &p.ids);
        if (!done.ok()) {
          p.error =
              absl::StrCat("cannot encode the segment at byte ", p.segment.file_offset, ": ", done.status().message());
          break;
        }
        text.erase(0, *done);
      }
      if (run + 2 == starts.size() && !batch.back().segment.ends_document) left_over = std::move(text);
    }
  });
  carry_ = std::move(left_over);
}

}  // namespace trainyard::tokenize
