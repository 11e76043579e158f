// The thread settings of the ranks that trainyard-train and trainyard-bench start:
// intra-op threads per rank and the environment that keeps OpenMP and OpenBLAS from
// oversubscribing the machine. Needs no torch.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/spec/job_spec.h"

namespace trainyard::engine {

// max(1, online cores / nproc).
int DefaultThreads(int nproc);

// The thread settings each rank gets unless this process's environment already sets
// them (as torchrun sets OMP_NUM_THREADS):
//   OMP_NUM_THREADS=T, OPENBLAS_NUM_THREADS=T: Debian's OpenBLAS is the pthreads build
//     and ignores at::set_num_threads, so without this every rank runs `cores` BLAS
//     threads next to its T OpenMP threads;
//   OMP_WAIT_POLICY=PASSIVE, when `openblas_threads_in_step`: idle OpenMP workers
//     otherwise spin (libgomp) while OpenBLAS's own threads run each GEMM on the same
//     cores. Measured on the debug preset, 1 rank, 2 cores: step 2.24 s spinning vs
//     1.06 s passive. Without OpenBLAS threads in the step, libgomp's default (spin
//     briefly, then sleep) is kept: the step's ~500 parallel regions then start
//     without a futex wake-up each (debug step 676–734 ms vs 757–782 ms passive, 3
//     runs each).
std::vector<std::pair<std::string, std::string>> RankThreadEnv(int threads, bool openblas_threads_in_step);

// Whether a rank of `config` runs GEMMs on OpenBLAS's own thread pool during its steps:
// all but a CPU step (eager or jit) with the fused kernels on (fused_cpu_kernels.h), which
// keeps OpenBLAS at one thread and splits every GEMM over its OpenMP threads.
bool OpenBlasThreadsInStep(const spec::JobSpec& config);

}  // namespace trainyard::engine
