// Tracked tensor bytes of this process: the memory its tensors hold, counted where
// LibTorch allocates it, so a rank can report the peak of one training step
// (StepMetrics.peak_tensor_bytes) without the noise of RSS (heap slack, the allocator's
// cached pages, the libraries' code and thread stacks). The memory preflight's estimate
// (common/spec/memory_estimate.h) is checked against it (bench/memory_table.cc).
//
// CPU: Install() puts a counting c10::Allocator in front of the CPU allocator
// (c10::SetCPUAllocator, priority kInstallPriority). Each allocation of n > 0 bytes asks
// the inner allocator for n + 64 bytes and keeps a header in the first 64 (the inner
// DataPtr and n), so the tensor's pointer keeps the 64-byte alignment and equals its
// DataPtr's context: raw_allocate / raw_deallocate (oneDNN's scratch memory goes
// through them) keep working, and the free knows n without a lookup. What is counted
// is the n requested: a tensor of nbytes raises the count by exactly nbytes; the
// header, the inner allocator's rounding and the heap's slack are not counted. Every
// allocation through the CPU allocator counts: tensor storages, and the raw buffers of
// oneDNN and of ATen's own temporaries, not the memory LibTorch or OpenBLAS take from
// malloc directly. Tensors allocated before Install() are not counted, and their free
// is not subtracted (their DataPtr keeps the inner allocator's deleter).
//
// CUDA (a CUDA LibTorch with NCCL: TRAINYARD_TORCH_NCCL, base/torch_compat.h, and a
// usable device): Install(device) for a CUDA device reads the CUDA caching allocator's
// statistics of that device instead (allocated_bytes, aggregate pool: the caching
// allocator's block sizes, rounded up to 512 bytes; not the cached reserve), and
// ResetPeak() resets its peak. The CPU allocator is left alone there.
//
// Threads: a rank allocates from its main thread, from the intra-op pool's threads
// (OpenMP / at::parallel_for), from the checkpoint writer and from Gloo's threads. The
// CPU counters are two std::atomic<int64_t>: every allocation and free does one
// fetch_add on the current count; an allocation then raises the peak with a
// compare-exchange loop to the count it left behind, so the peak is the exact maximum
// of the current count over time, whatever the interleaving. No lock on the hot path.
// Install() must run before other threads allocate (c10's allocator registry is a
// plain array, not thread-safe) — at the start of main / RunRank. ResetPeak() sets the
// peak to the current count; an allocation that runs concurrently with the reset may
// be missing from the new peak (the trainer resets at a step's start, from the step's
// own thread). CurrentBytes() and PeakBytes() may be called from any thread.
//
// TRAINYARD_TENSOR_MEMORY=0 (or "off") in the environment makes Install() do nothing:
// every figure below is then 0, as in a process that never called it.
#pragma once

#include <cstdint>
#include <string>

#include <c10/core/Device.h>

namespace trainyard::engine::tensor_memory {

// The priority the counting allocator is registered with (c10's default CPU allocator
// has 0; the mobile allocator LibTorch can switch to uses 100, and replaces ours then).
inline constexpr int kInstallPriority = 100;

// Starts tracking for `device` (CPU, or a CUDA device on a CUDA build). Only the first
// call counts; later calls return what the first one did. Returns false when nothing is
// tracked: switched off by TRAINYARD_TENSOR_MEMORY, a CUDA device this build or
// process cannot use, or another CPU allocator of higher priority in place.
bool Install(const c10::Device& device = c10::Device(c10::DeviceType::CPU));

// Whether Install() set up tracking.
bool Installed();

// What is counted: "cpu_allocator", "cuda_caching_allocator:N", or "" when nothing.
std::string Source();

// Bytes held now, and the most held since Install() or the last ResetPeak(). 0 when
// nothing is tracked.
int64_t CurrentBytes();
int64_t PeakBytes();

// peak := current.
void ResetPeak();

}  // namespace trainyard::engine::tensor_memory
