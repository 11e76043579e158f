// trainyard-train: runs a job locally on N trainyard-rank processes, as torchrun does.
// stdout: with --json, rank 0's events and every rank's compile, stall and artifact
// events as they come, each the proto3 JSON of a trainyard.v1.Event with rank and
// attempt set (the CLI's --json dialect); otherwise one human line per step and per
// compile event. Diagnostics and
// the ranks' stderr go to stderr. Exits 0 when every rank succeeded, else the failing
// rank's exit code with its error on stderr.
//
// --preflight runs 3 steps of the job's exact structure (layers, regions, layout,
// activation checkpointing, backend; jit in place of cudagraph) on local CPU ranks
// and exits 0 when clean, 3 when a rank reported UNSAFE_SIDE_EFFECT or
// RECOMPILE_LIMIT, 1 when a rank failed otherwise, 2 on bad input. --shrink scales the
// widths down (dim, hidden sizes, vocab, sequence, batch) but keeps the structure.
//
// --resume DIR continues from a checkpoint directory (any layout); the run writes its
// own checkpoints to checkpoint.dir with the next free attempt number there, so it
// never writes into a directory of an earlier run.
//
// Every rank's stall and artifact events are shown (a hung rank is reported by its
// watchdog and exits 86; docs/diagnostics.md). --run-dir DIR goes to every rank.
//
// --set resources.device=cuda trains on CUDA (rank i on GPU i % device_count, NCCL
// groups); a build or machine without CUDA refuses it before any rank starts (exit 2).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/events/proto_json.h"
#include "common/spec/json_io.h"
#include "worker/engine/checkpoint/checkpoint_layout.h"
#include "worker/engine/config/engine_config.h"
#include "worker/engine/launch/engine_capabilities.h"
#include "worker/engine/launch/local_launcher.h"
#include "worker/engine/parallel/mesh/device_placement.h"
#include "worker/launch/rank_launch.h"

namespace {

using namespace trainyard::engine;

struct TrainFlags {
  std::string config_path;
  std::vector<std::string> overrides;
  int nproc = 0;  // 0: dp*tp from the config
  int threads = 0;  // 0: cores / nproc
  std::string save_init;
  std::string save_final;
  std::string load;
  std::string resume;
  std::string run_dir;  // the ranks' --run-dir (flight rings, dumps, profiler traces)
  bool json_output = false;
  bool print_config = false;
  bool preflight = false;
  bool shrink = false;
};

constexpr int kExitFindings = 3;

// Same structure, smaller widths: layers, heads, experts, top-k and the parallel layout
// are kept; every width stays divisible by what the layout needs.
void Shrink(EngineConfig& config) {
  ModelConfig& m = config.model;
  const int tp = config.parallelism.tp;
  const int head_dim = 8;
  m.dim = std::min(m.dim, m.n_heads * head_dim);
  // Token files hold ids up to the model's vocabulary: only synthetic data may shrink it.
  if (config.training.dataset == "synthetic") m.vocab_size = std::min(m.vocab_size, 256);
  m.ffn_hidden = std::min(m.ffn_hidden, 16 * tp);
  m.expert_hidden = std::min(m.expert_hidden, 8 * tp);
  config.training.seq_len = std::min(config.training.seq_len, 32);
  config.training.batch_size = std::min(config.training.batch_size, 2);
}

void PreflightConfig(EngineConfig& config, bool shrink) {
  config.training.steps = 3;
  config.training.warmup_steps = 1;
  config.training.log_freq = 1;
  // The preflight runs on CPU ranks: cudagraph's capture is checked through jit, the
  // same regions and guards.
  if (config.compile.backend == "cudagraph") config.compile.backend = "jit";
  config.compile.summary_every = 3;
  config.resources.device = "cpu";
  // The compile structure does not depend on the tokens, and the controller's machine
  // need not reach the job's dataset: the preflight trains on synthetic data, without
  // evaluation, checkpoints or initial weights.
  config.training.dataset = "synthetic";
  config.training.dataset_path.clear();
  config.training.shuffle = false;
  config.validation = trainyard::spec::ValidationSpec();
  config.checkpoint.initial_load_path.clear();
  if (shrink) Shrink(config);
}

bool IsFinding(const trainyard::v1::Event& event) {
  return event.has_compile() && (event.compile().kind() == trainyard::v1::CompileEvent::UNSAFE_SIDE_EFFECT ||
                                 event.compile().kind() == trainyard::v1::CompileEvent::RECOMPILE_LIMIT);
}

std::string Layers(const trainyard::v1::CompileEvent& c) {
  std::string out = "[";
  for (int i = 0; i < c.layers_size(); ++i) out += (i ? "," : "") + std::to_string(c.layers(i));
  return out + "]";
}

void PrintHuman(const trainyard::v1::Event& event) {
  const int rank = event.rank();
  if (event.has_step_metrics()) {
    const auto& m = event.step_metrics();
    std::printf("step %5lld  loss %.4f  grad_norm %.4f  lr %.3e  tok/s %.0f  step_ms %.1f%s\n",
                static_cast<long long>(m.step()), m.loss(), m.grad_norm(), m.lr(), m.tokens_per_s(), m.step_ms(),
                m.epoch() > 0 ? ("  epoch " + std::to_string(m.epoch())).c_str() : "");
  } else if (event.has_validation()) {
    const auto& v = event.validation();
    std::printf("validation after step %lld  loss %.4f  tokens %lld  ms %.1f\n", static_cast<long long>(v.step()),
                v.loss(), static_cast<long long>(v.tokens()), v.ms());
  } else if (event.has_compile()) {
    const auto& c = event.compile();
    std::printf("rank %d  %-18s %s layers=%s%s%s\n", rank, trainyard::v1::CompileEvent::Kind_Name(c.kind()).c_str(),
                c.region().c_str(), Layers(c).c_str(), c.reason().empty() ? "" : "  ", c.reason().c_str());
  } else if (event.has_checkpoint()) {
    const auto& c = event.checkpoint();
    std::printf("checkpoint step %lld  %s  %lld bytes  blocked_ms %.1f  write_ms %.1f\n",
                static_cast<long long>(c.step()), c.path().c_str(), static_cast<long long>(c.bytes()), c.blocked_ms(),
                c.write_ms());
  } else if (event.has_stall()) {
    const auto& st = event.stall();
    std::printf("rank %d  STALL %s #%lld lagging_rank=%d waited_s=%.1f: %s\n", rank,
                st.collective().empty() ? "(step timeout)" : st.collective().c_str(),
                static_cast<long long>(st.collective_seq()), st.lagging_rank(), st.waited_s(), st.message().c_str());
  } else if (event.has_artifact()) {
    const auto& a = event.artifact();
    std::printf("rank %d  artifact %s (%s, %lld bytes) %s\n", rank, a.name().c_str(), a.kind().c_str(),
                static_cast<long long>(a.size_bytes()), a.uri().c_str());
  } else if (event.has_log()) {
    std::printf("[%s] %s\n", event.log().level().c_str(), event.log().message().c_str());
  }
  std::fflush(stdout);
}

int Train(const TrainFlags& f) {
  EngineConfig config = LoadLocalJob(f.config_path, f.overrides);
  if (f.preflight) {
    PreflightConfig(config, f.shrink);
    RequireValid(config);
  }
  // A device this build or machine cannot use, or a setting this build cannot run
  // (cudagraph in a CPU build), is refused here, before any rank starts: exit 2.
  DevicePlacement::RequireUsable(config.resources);
  RequireSupported(config);
  const std::string config_json = trainyard::spec::ToJson(config);
  if (f.print_config) {
    std::cout << config_json << std::endl;
    return 0;
  }
  const int world = config.parallelism.world_size();
  if (f.nproc != 0 && f.nproc != world) {
    throw std::invalid_argument("--nproc " + std::to_string(f.nproc) + " disagrees with parallelism.dp*tp = " +
                                std::to_string(world));
  }
  LaunchOptions opts;
  opts.rank_binary = LocalLauncher::RankBinaryNextToSelf();
  opts.config_json = config_json;
  opts.device = config.resources.device;
  opts.nproc = world;
  opts.threads = f.threads > 0 ? f.threads : trainyard::DefaultRankThreads(trainyard::OnlineCores(), world);
  opts.run_dir = f.run_dir;
  opts.resume_path = f.resume;
  if (!f.save_init.empty()) opts.rank_args.insert(opts.rank_args.end(), {"--save-init", f.save_init});
  if (!f.save_final.empty()) opts.rank_args.insert(opts.rank_args.end(), {"--save-final", f.save_final});
  if (!f.load.empty()) opts.rank_args.insert(opts.rank_args.end(), {"--load", f.load});
  // Also with interval 0: a requested checkpoint (RUN_DIR/checkpoint.request) goes there.
  if (!config.checkpoint.dir.empty() && !f.preflight) opts.attempt = NextCheckpointAttempt(config.checkpoint.dir);

  LocalLauncher::InstallSignalHandlers();
  int findings = 0;
  const LaunchResult result = LocalLauncher::Run(opts, [&](const trainyard::v1::Event& event) {
    // Rank 0's events, and every rank's compile, stall and artifact events; other ranks'
    // errors reach stderr through their own stderr.
    if (event.rank() != 0 && !event.has_compile() && !event.has_stall() && !event.has_artifact()) return;
    if (IsFinding(event)) ++findings;
    if (f.json_output) {
      std::cout << trainyard::ToJsonLine(event) << std::endl;
    } else {
      PrintHuman(event);
    }
  });
  if (f.preflight) {
    if (findings > 0) {
      std::cerr << "trainyard-train: preflight: " << findings
                << " finding(s) (UNSAFE_SIDE_EFFECT / RECOMPILE_LIMIT) above" << std::endl;
      return kExitFindings;
    }
    if (result.exit_code != 0) {
      std::cerr << "trainyard-train: preflight: " << result.error << std::endl;
      return 1;
    }
    std::cerr << "trainyard-train: preflight: clean (3 steps, no unsafe side effect, no recompile limit)" << std::endl;
    return 0;
  }
  if (result.exit_code != 0) std::cerr << "trainyard-train: " << result.error << std::endl;
  return result.exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  TrainFlags f;
  CLI::App app{"trainyard-train: run a Trainyard job on local trainyard-rank processes\n"
               "  --set resources.device=cuda: train on CUDA (rank i on GPU i % device_count, NCCL groups;\n"
               "  NCCL takes one rank per GPU); needs a CUDA build of LibTorch and a visible GPU"};
  app.add_option("config", f.config_path, "job file: TOML, or JobSpec proto3 JSON")->required();
  app.add_option("--set", f.overrides, "override section.key=value (repeatable)")->allow_extra_args(false);
  app.add_option("--nproc", f.nproc, "number of ranks; must equal parallelism.dp*tp (default: that)");
  app.add_option("--threads", f.threads,
                 "intra-op threads per rank (default: cores / nproc; sets OMP_NUM_THREADS and "
                 "OPENBLAS_NUM_THREADS for the ranks unless set, and OMP_WAIT_POLICY=PASSIVE for CUDA ranks: "
                 "the worker daemon's rule, worker/launch/rank_launch.h)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--save-init", f.save_init, "rank writes the initial weights to this .safetensors");
  app.add_option("--save-final", f.save_final,
                 "rank 0 writes the full weights after the last step to this .safetensors (torchtitan names)");
  app.add_option("--load", f.load, "ranks start from these weights: a full .safetensors file, a checkpoint directory or a folder of them "
                 "(its newest), written under any layout");
  app.add_option("--resume", f.resume, "ranks continue from this checkpoint directory (written under any layout)");
  app.add_option("--run-dir", f.run_dir,
                 "ranks keep flight-recorder rings in DIR/flight and write flight dumps and profiler traces "
                 "to DIR/artifacts (default: each rank's temp folder, see trainyard-rank --help)");
  app.add_flag("--json", f.json_output, "print rank 0's events as JSON lines");
  app.add_flag("--print-config", f.print_config,
               "print the normalised JobSpec JSON and exit; with --preflight [--shrink], the spec the "
               "preflight would run (the preflight runner reads it to size its memory check)");
  app.add_flag("--preflight", f.preflight,
               "run 3 steps of the job's structure on local CPU ranks and report compile findings "
               "(exit 0 clean, 3 findings, 1 rank failure, 2 bad input)");
  app.add_flag("--shrink", f.shrink, "with --preflight: scale widths down, keep the structure");
  CLI11_PARSE(app, argc, argv);
  try {
    return Train(f);
  } catch (const std::exception& e) {
    std::cerr << "trainyard-train: error: " << e.what() << std::endl;
    return 2;
  }
}
