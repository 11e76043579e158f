// `trainyard export`: one safetensors file of a job's trained model from its sharded
// checkpoints, or a Hugging Face model folder (config.json from the job's model keys:
// the controller's spec with a job id, else --job-file) (worker/engine/checkpoint/checkpoint_export.h does the work,
// without torch). With a job id it asks the controller for the job (GetJob) and reads the checkpoints under
// spec.checkpoint.dir/<job id>/ (common/spec/checkpoint_path.h), so it runs where that folder is readable; --checkpoint
// DIR reads a checkpoint directory or a folder of them instead (no controller needed, or with a job id: the job's spec
// and id for the file's metadata, the checkpoints from DIR, for a folder mounted elsewhere).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "client/job_client.h"

namespace trainyard::cli {

struct ExportCommandOptions {
  std::string job_id;      // "" with --checkpoint alone
  std::string checkpoint;  // --checkpoint: a checkpoint directory or a folder of them
  std::optional<int64_t> step;
  bool best = false;                 // --best: the lowest metric (checkpoint.keep_best); excludes --step
  std::string output;                // -o: a .safetensors file, or with --names hf a folder
  std::string job_file;              // --job-file: the model keys for a folder's config.json
  std::string names = "torchtitan";  // --names torchtitan|hf
  bool force = false;                // replace an existing output
  bool json = false;                 // one JSON object line instead of the text line
};

// Runs the export and prints one line: the checkpoint, its step and layout, the tensor
// count and size, and the output path (text), or the same as one JSON object. `client`
// may be null when options.job_id is empty. Errors print "trainyard: CODE: message" on
// `err`; returns the CLI's exit code (cli_format.h): 2 bad flags or --names hf without
// a name for a tensor, 3 no such job, no complete checkpoint, no checkpoint of --step
// (the message lists the steps there) or no output folder, 6 an output that exists
// without --force, a job without checkpoint.dir, a damaged checkpoint, a write error.
int RunExportCommand(const ExportCommandOptions& options, JobClient* client, std::ostream& out, std::ostream& err);

}  // namespace trainyard::cli
