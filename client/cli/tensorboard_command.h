// `trainyard tensorboard JOB... -o DIR`: TensorBoard event files for stored jobs, one
// run folder per job attempt (DIR/JOB/attempt-A/, common/tensorboard/job_run_writer.h),
// written from the job's events as the controller stored them (GetJob, then WatchJob
// from seq 1 up to the job's last seq at that moment).
//
// Every job is looked up before anything is written, so an unknown id writes nothing.
// A job's runs are written into a hidden folder under DIR and renamed to DIR/JOB when
// complete: DIR/JOB appears whole or not at all, and an existing DIR/JOB (an earlier
// export, or the controller's --tensorboard-dir) is never overwritten.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "client/job_client.h"

namespace trainyard::cli {

struct TensorBoardCommandOptions {
  std::vector<std::string> job_ids;
  std::string output_dir;  // -o
  std::string host;        // in the file names (the machine's host name)
  bool json = false;       // one JSON object line per job instead of the text line
};

// Prints one line per job: its run folders and record count, or that no attempt ran.
// Errors print "trainyard: CODE: message" on `err`; returns the CLI's exit code
// (cli_format.h): 2 an -o that is not a writable folder, 3 an unknown job, 6 a job
// whose events were compacted, a DIR/JOB that exists, a write error.
int RunTensorBoardCommand(const TensorBoardCommandOptions& options, JobClient* client, std::ostream& out,
                          std::ostream& err);

}  // namespace trainyard::cli
