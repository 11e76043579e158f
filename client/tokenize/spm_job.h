// The SentencePiece side of a tokenize run (--model, --train-vocab): the model loaded or
// trained on the inputs' lines, the EOS its documents end with, and the batches encoded
// one segment at a time. spm_model.h is the model itself.
//
// Thread contract: as RunTokenize's (tokenize_job.h): one run at a time, since
// SentencePiece's trainer is global.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/tokenize/batch_encoder.h"
#include "client/tokenize/input_files.h"
#include "client/tokenize/progress.h"
#include "client/tokenize/spm_model.h"
#include "client/tokenize/tokenize_job.h"

namespace trainyard::tokenize {

// The model of a run with --model or --train-vocab: loaded, or trained on every input's
// lines (its bytes in *trained). Sets summary->tokenizer (and train_seconds).
absl::StatusOr<std::unique_ptr<SpmModel>> PrepareSpmModel(const TokenizeOptions& options, const InputListing& listing,
                                                          ProgressDisplay* progress, const TokenizeEnv& env,
                                                          int threads, std::string* trained, TokenizeSummary* summary);

// The id after every document for --eos as parsed (-2 auto, -1 none, else an id): auto
// is the model's eos_id, an error when it has none; none is -1; an id must be a piece.
absl::StatusOr<int> SpmDocumentEos(const SpmModel& model, int eos_option);

// Encodes each segment on its own; the threads take the next segment from a shared
// counter.
class SpmBatchEncoder : public BatchEncoder {
 public:
  SpmBatchEncoder(const SpmModel* model, int threads) : model_(model), threads_(threads) {}
  void Encode(std::vector<PendingSegment>* batch) override;

 private:
  const SpmModel* model_;
  int threads_;
};

}  // namespace trainyard::tokenize
