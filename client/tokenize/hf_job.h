// The tokenizer.json side of a tokenize run (--tokenizer): the specials its template
// puts around every document, and the batches encoded a whole document at a time.
// hf_tokenizer.h is the encoder itself.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/tokenize/batch_encoder.h"
#include "client/tokenize/hf_tokenizer.h"

namespace trainyard::tokenize {

// The ids before (*bos) and after (*eos) every document for --eos as parsed (-2 auto,
// -1 none, else an id): auto takes the post-processor's specials around $A, an error
// when it puts none; none puts nothing; an id keeps the ones before and puts the id
// after, an error past the vocabulary. `name` ("--tokenizer 'PATH'") starts the errors.
absl::Status HfDocumentSpecials(const HfTokenizer& hf, int eos_option, const std::string& name, std::vector<int>* bos,
                                std::vector<int>* eos);

// A document's segments are encoded in order by one thread, each segment after what the
// previous one left undecided (HfEncoder::Encode), so the ids are those of the whole
// document; threads take whole documents, and what the batch's last, unfinished
// document left waits in carry_ for the next batch.
class HfBatchEncoder : public BatchEncoder {
 public:
  HfBatchEncoder(const HfTokenizer* hf, int threads);
  void Encode(std::vector<PendingSegment>* batch) override;

 private:
  int threads_;
  std::vector<std::unique_ptr<HfEncoder>> encoders_;  // one per thread
  std::string carry_;                                 // undecided text of the document the last batch left open
};

}  // namespace trainyard::tokenize
