#include "worker/engine/local_launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#if TRAINYARD_HAVE_TOMLPP
#include <toml++/toml.h>
#endif

namespace trainyard::engine {
namespace {

using nlohmann::json;

// ---- Config ----

constexpr std::size_t kMaxJobFileBytes = std::size_t{1} << 20;  // as common/job_file.h
constexpr const char* kDefaultPreset = "debug";                  // as common/spec_defaults.h
constexpr int kDefaultWarmupSteps = 10;

// Every JobSpec key with its default; the JSON type of the default is the key's type
// (integer, float, boolean, string). Mirrors BaseDefaults() in common/spec_defaults.cc.
const json& Defaults() {
  static const json* d = new json(json::parse(R"({
    "job": {"name": "job", "priority": 0},
    "model": {"preset": "", "vocab_size": 0, "dim": 0, "n_layers": 0, "n_dense_layers": 0,
              "n_heads": 0, "n_kv_heads": 0, "ffn_hidden": 0, "n_routed_experts": 0,
              "top_k": 0, "n_shared_experts": 0, "expert_hidden": 0, "score_func": "sigmoid",
              "route_norm": true, "route_scale": 1.0, "rope_theta": 10000.0,
              "norm_eps": 1e-5, "load_balance_coeff": 1e-3},
    "training": {"steps": 100, "batch_size": 0, "seq_len": 0, "lr": 8e-4, "warmup_steps": 10,
                 "max_norm": 1.0, "seed": 42, "dataset": "synthetic", "dataset_path": "",
                 "log_freq": 1},
    "parallelism": {"dp": 1, "tp": 1, "ep": 1, "collective_timeout_s": 300.0},
    "compile": {"backend": "eager", "regions": "per_layer", "recompile_limit": 8,
                "on_side_effect": "error", "preflight": false, "summary_every": 100,
                "test_plant_side_effect": false},
    "activation_checkpoint": {"mode": "none"},
    "profiling": {"enable": false, "freq": 100, "warmup": 3, "active": 2},
    "checkpoint": {"interval": 0, "keep": 3, "initial_load_path": ""},
    "resources": {"device": "cpu", "ranks_per_worker": 0},
    "restart": {"max_restarts": 0}
  })"));
  return *d;
}

// Presets: the model keys plus seq_len and batch_size. Mirrors Presets() in
// common/spec_defaults.cc (and DESIGN.md "Reference configuration").
const json& Presets() {
  static const json* p = new json(json::parse(R"({
    "debug": {"model": {"vocab_size": 2048, "dim": 256, "n_layers": 4, "n_dense_layers": 1,
                        "n_heads": 8, "n_kv_heads": 4, "ffn_hidden": 768, "n_routed_experts": 8,
                        "top_k": 2, "n_shared_experts": 1, "expert_hidden": 256},
              "training": {"seq_len": 256, "batch_size": 8}},
    "tiny": {"model": {"vocab_size": 256, "dim": 64, "n_layers": 2, "n_dense_layers": 1,
                       "n_heads": 4, "n_kv_heads": 2, "ffn_hidden": 128, "n_routed_experts": 4,
                       "top_k": 2, "n_shared_experts": 1, "expert_hidden": 32},
             "training": {"seq_len": 32, "batch_size": 4}}
  })"));
  return *p;
}

[[noreturn]] void Bad(const std::string& message) { throw std::invalid_argument(message); }

std::string KindOf(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "float";
  if (v.is_boolean()) return "boolean";
  if (v.is_string()) return "string";
  if (v.is_object()) return "table";
  if (v.is_array()) return "array";
  return "null";
}

// The default of section.key, or throws "unknown ...".
const json& Schema(const std::string& where, const std::string& section, const std::string& key) {
  const json& d = Defaults();
  auto s = d.find(section);
  if (s == d.end()) Bad(where + "unknown section [" + section + "]");
  auto k = s->find(key);
  if (k == s->end()) Bad(where + "unknown key " + section + "." + key);
  return *k;
}

// Checks `value` against the key's type; returns the value to store. proto3 JSON
// spells 64-bit integers as strings, so integer keys accept digit strings too.
json Coerce(const std::string& where, const std::string& section, const std::string& key, const json& value) {
  const json& d = Schema(where, section, key);
  const std::string path = section + "." + key;
  if (d.is_number_integer()) {
    if (value.is_number_integer()) return value;
    if (value.is_string()) {
      const std::string s = value.get<std::string>();
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return v;
    }
    Bad(where + path + ": expected integer, got " + KindOf(value));
  }
  if (d.is_number_float()) {
    if (value.is_number()) return value.get<double>();
    Bad(where + path + ": expected float, got " + KindOf(value));
  }
  if (d.is_boolean()) {
    if (value.is_boolean()) return value;
    Bad(where + path + ": expected boolean, got " + KindOf(value));
  }
  if (value.is_string()) return value;
  Bad(where + path + ": expected string, got " + KindOf(value));
}

#if TRAINYARD_HAVE_TOMLPP
json TomlToJson(const toml::node& node) {
  if (auto v = node.as_integer()) return v->get();
  if (auto v = node.as_floating_point()) return v->get();
  if (auto v = node.as_boolean()) return v->get();
  if (auto v = node.as_string()) return v->get();
  if (node.is_table()) return json::object();  // reported as a type error by Coerce
  return json::array();
}

std::string Position(const std::string& path, const toml::source_region& r) {
  return path + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column) + ": ";
}

json ParseTomlJob(const std::string& text, const std::string& path) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    Bad(Position(path, e.source()) + std::string(e.description()));
  }
  json spec = json::object();
  for (auto&& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    if (!section_node.is_table()) {
      Bad(Position(path, section_key.source()) + "unknown key " + section +
          " (keys belong in a section such as [job] or [training])");
    }
    if (!Defaults().contains(section)) Bad(Position(path, section_key.source()) + "unknown section [" + section + "]");
    spec[section] = json::object();
    for (auto&& [key, node] : *section_node.as_table()) {
      const std::string name(key.str());
      Schema(Position(path, key.source()), section, name);  // unknown keys point at the key
      spec[section][name] = Coerce(Position(path, node.source()), section, name, TomlToJson(node));
    }
  }
  return spec;
}

#else
json ParseTomlJob(const std::string&, const std::string& path) {
  Bad(path + ": this build has no TOML support (toml++ was not found); use a JSON job file");
}
#endif

json ParseJsonJob(const std::string& text, const std::string& path) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    Bad(path + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) Bad(path + ": top level must be a JSON object");
  json spec = json::object();
  for (auto& [section, body] : root.items()) {
    if (!body.is_object()) Bad(path + ": " + section + ": expected an object, got " + KindOf(body));
    spec[section] = json::object();
    for (auto& [key, value] : body.items()) {
      if (value.is_null()) continue;  // proto3 JSON: null means unset
      spec[section][key] = Coerce(path + ": ", section, key, value);
    }
  }
  return spec;
}

void ApplyOverride(const std::string& text, json& spec) {
  const std::size_t eq = text.find('=');
  const std::size_t dot = text.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq) {
    Bad("--set " + text + ": expected section.key=value");
  }
  const std::string section = text.substr(0, dot);
  const std::string key = text.substr(dot + 1, eq - dot - 1);
  const std::string raw = text.substr(eq + 1);
  const std::string where = "--set ";
  const json& d = Schema(where, section, key);
  // The value is a scalar literal (20, 1e-3, false, "softmax"); anything else is a string.
  json value = json::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded() || value.is_structured() || value.is_null()) value = raw;
  if (d.is_string() && !value.is_string()) value = raw;  // --set job.name=123 means "123"
  spec[section][key] = Coerce(where, section, key, value);
}

json Normalise(json spec) {
  const std::string preset_name = spec.contains("model") && spec["model"].contains("preset")
                                      ? spec["model"]["preset"].get<std::string>()
                                      : kDefaultPreset;
  const json& presets = Presets();
  if (!presets.contains(preset_name)) {
    Bad("model.preset: unknown preset \"" + preset_name + "\" (known: debug, tiny)");
  }
  const bool warmup_given = spec.contains("training") && spec["training"].contains("warmup_steps");
  json out = Defaults();
  out.merge_patch(presets[preset_name]);
  out["model"]["preset"] = preset_name;
  out.merge_patch(spec);  // explicit keys override preset and defaults
  if (!warmup_given) {
    const int steps = out["training"]["steps"].get<int>();
    out["training"]["warmup_steps"] = std::max(0, std::min(kDefaultWarmupSteps, steps));
  }
  return out;
}

std::string ReadCapped(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Bad(path + ": cannot open job file");
  std::string text;
  text.resize(kMaxJobFileBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxJobFileBytes) {
    Bad(path + ": job file is larger than " + std::to_string(kMaxJobFileBytes) + " bytes");
  }
  return text;
}

bool LooksLikeJson(const std::string& path, const std::string& text) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) return true;
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string::npos && text[first] == '{';
}

// ---- Processes ----

int g_stop_pipe[2] = {-1, -1};
volatile sig_atomic_t g_stop_signal = 0;

void OnStopSignal(int sig) {
  g_stop_signal = sig;
  if (g_stop_pipe[1] >= 0) {
    const char b = 1;
    [[maybe_unused]] ssize_t w = ::write(g_stop_pipe[1], &b, 1);
  }
}

void EnsureStopPipe() {
  if (g_stop_pipe[0] >= 0) return;
  if (::pipe2(g_stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
}

struct Rank {
  pid_t pid = -1;
  int out_fd = -1;  // read end of the rank's stdout
  std::string partial;
  bool exited = false;
  RankOutcome outcome;
};

pid_t Spawn(const std::vector<std::string>& args, const std::vector<std::string>& env, int stdout_write_fd) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Async-signal-safe calls only between fork and exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphaned ranks if the launcher dies
    if (::getppid() != parent) ::_exit(127);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::dup2(stdout_write_fd, 1);
    ::execve(argv[0], argv.data(), envp.data());
    const char msg[] = "trainyard-train: exec of trainyard-rank failed\n";
    [[maybe_unused]] ssize_t w = ::write(2, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  return pid;
}

std::string ErrorFromLine(const std::string& line) {
  json event = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (event.is_object() && event.contains("log") && event["log"].value("level", "") == "error") {
    return event["log"].value("message", "");
  }
  return "";
}

std::string ExitText(int code) {
  if (code > 128) return "was killed by signal " + std::to_string(code - 128);
  return "exited with code " + std::to_string(code);
}

}  // namespace

json LoadLocalJobConfig(const std::string& path, const std::vector<std::string>& overrides) {
  const std::string text = ReadCapped(path);
  json spec = LooksLikeJson(path, text) ? ParseJsonJob(text, path) : ParseTomlJob(text, path);
  for (const auto& o : overrides) ApplyOverride(o, spec);
  return Normalise(std::move(spec));
}

json PresetJobConfig(const std::string& preset, const std::vector<std::string>& overrides) {
  json spec = {{"model", {{"preset", preset}}}};
  for (const auto& o : overrides) ApplyOverride(o, spec);
  return Normalise(std::move(spec));
}

int ConfigWorldSize(const json& config) {
  return config.at("parallelism").at("dp").get<int>() * config.at("parallelism").at("tp").get<int>();
}

void LocalLauncher::InstallSignalHandlers() {
  EnsureStopPipe();
  struct sigaction sa {};
  sa.sa_handler = &OnStopSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

std::string LocalLauncher::RankBinaryNextToSelf() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  std::string self(buf, static_cast<std::size_t>(n));
  const std::size_t slash = self.find_last_of('/');
  return self.substr(0, slash + 1) + "trainyard-rank";
}

int LocalLauncher::FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error(std::string("cannot find a free loopback port: ") + std::strerror(errno));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

int LocalLauncher::DefaultThreads(int nproc) {
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  return std::max(1, static_cast<int>(cores) / std::max(1, nproc));
}

std::vector<std::pair<std::string, std::string>> LocalLauncher::RankThreadEnv(int threads,
                                                                            bool openblas_threads_in_step) {
  std::vector<std::pair<std::string, std::string>> env;
  const std::string t = std::to_string(threads);
  std::vector<std::pair<std::string, std::string>> wanted = {{"OMP_NUM_THREADS", t}, {"OPENBLAS_NUM_THREADS", t}};
  if (openblas_threads_in_step) wanted.emplace_back("OMP_WAIT_POLICY", "PASSIVE");
  for (const auto& [name, value] : wanted) {
    if (std::getenv(name.c_str()) == nullptr) env.emplace_back(name, value);
  }
  return env;
}

bool LocalLauncher::OpenBlasThreadsInStep(const nlohmann::json& config) {
  const char* fused = std::getenv("TRAINYARD_FUSED_CPU_KERNELS");  // read again by each rank
  const bool fused_on = fused == nullptr || std::string(fused) != "0";
  const bool eager_cpu = config.at("compile").value("backend", "eager") == "eager" &&
                         config.at("resources").value("device", "cpu") == "cpu";
  return !(fused_on && eager_cpu);
}

LaunchResult LocalLauncher::Run(const LaunchOptions& options, const LineHandler& on_line) {
  EnsureStopPipe();
  if (options.nproc < 1) throw std::runtime_error("nproc must be at least 1");
  if (::access(options.rank_binary.c_str(), X_OK) != 0) {
    throw std::runtime_error("rank binary " + options.rank_binary + " is not executable: " + std::strerror(errno));
  }
  // The config travels as a file: argv has size limits and shows up in `ps`.
  const char* tmpdir = std::getenv("TMPDIR");
  std::string config_path = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/trainyard-train-XXXXXX.json";
  const int cfd = ::mkstemps(config_path.data(), 5);
  if (cfd < 0) throw std::runtime_error("cannot create a config file in " + config_path + ": " + std::strerror(errno));
  const std::string config_text = options.config.dump();
  const bool wrote = ::write(cfd, config_text.data(), config_text.size()) == static_cast<ssize_t>(config_text.size());
  ::close(cfd);
  struct ConfigFileRemover {
    std::string path;
    ~ConfigFileRemover() { ::unlink(path.c_str()); }
  } remover{config_path};
  if (!wrote) throw std::runtime_error("cannot write " + config_path);

  const int port = FreeLoopbackPort();
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  for (const auto& [name, value] : options.rank_env) {
    const std::string prefix = name + "=";
    env.erase(std::remove_if(env.begin(), env.end(), [&](const std::string& e) { return e.rfind(prefix, 0) == 0; }),
              env.end());
    env.push_back(prefix + value);
  }
  std::vector<Rank> ranks(static_cast<std::size_t>(options.nproc));
  LaunchResult result;
  auto terminate_all = [&](int sig) {
    for (const Rank& r : ranks) {
      if (r.pid > 0 && !r.exited) ::kill(r.pid, sig);
    }
  };
  for (int i = 0; i < options.nproc; ++i) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      terminate_all(SIGKILL);
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    }
    std::vector<std::string> args = {options.rank_binary, "--config", config_path,
                                     "--rank", std::to_string(i),
                                     "--local-rank", std::to_string(i),
                                     "--world-size", std::to_string(options.nproc),
                                     "--master-addr", "127.0.0.1",
                                     "--master-port", std::to_string(port),
                                     "--threads", std::to_string(options.threads)};
    args.insert(args.end(), options.rank_args.begin(), options.rank_args.end());
    try {
      ranks[i].pid = Spawn(args, env, fds[1]);
    } catch (...) {
      ::close(fds[0]);
      ::close(fds[1]);
      terminate_all(SIGKILL);
      throw;
    }
    ::close(fds[1]);
    ranks[i].out_fd = fds[0];
  }

  using Clock = std::chrono::steady_clock;
  bool stopping = false;
  Clock::time_point kill_at;
  int alive = options.nproc;
  while (alive > 0) {
    std::vector<pollfd> pfds;
    std::vector<int> owner;
    for (int i = 0; i < options.nproc; ++i) {
      if (ranks[i].out_fd >= 0) {
        pfds.push_back({ranks[i].out_fd, POLLIN, 0});
        owner.push_back(i);
      }
    }
    pfds.push_back({g_stop_pipe[0], POLLIN, 0});
    ::poll(pfds.data(), pfds.size(), 100);

    for (std::size_t p = 0; p + 1 < pfds.size(); ++p) {
      if (!(pfds[p].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Rank& r = ranks[owner[p]];
      char buf[65536];
      const ssize_t n = ::read(r.out_fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (!r.partial.empty()) {
          if (std::string e = ErrorFromLine(r.partial); !e.empty()) r.outcome.error = e;
          on_line(owner[p], r.partial);
          r.partial.clear();
        }
        ::close(r.out_fd);
        r.out_fd = -1;
        continue;
      }
      r.partial.append(buf, static_cast<std::size_t>(n));
      std::size_t start = 0, nl;
      while ((nl = r.partial.find('\n', start)) != std::string::npos) {
        const std::string line = r.partial.substr(start, nl - start);
        start = nl + 1;
        if (std::string e = ErrorFromLine(line); !e.empty()) r.outcome.error = e;
        on_line(owner[p], line);
      }
      r.partial.erase(0, start);
    }
    if (pfds.back().revents & POLLIN) {
      char drain[64];
      while (::read(g_stop_pipe[0], drain, sizeof(drain)) > 0) {
      }
    }
    if (g_stop_signal != 0 && !result.interrupted) {
      result.interrupted = true;
      result.exit_code = 128 + g_stop_signal;
      result.error = std::string("interrupted by ") + (g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
    }

    // Reap. A rank's stdout may still hold its last lines; those are read above on
    // the next turns, and the error message is composed after the loop.
    for (int i = 0; i < options.nproc; ++i) {
      Rank& r = ranks[i];
      if (r.exited) continue;
      int status = 0;
      rusage usage{};
      const pid_t w = ::wait4(r.pid, &status, WNOHANG, &usage);
      if (w != r.pid) continue;
      r.exited = true;
      --alive;
      r.outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      r.outcome.peak_rss_mb = static_cast<double>(usage.ru_maxrss) / 1024.0;
      if (r.outcome.exit_code != 0 && result.failed_rank < 0 && !result.interrupted && !stopping) {
        result.failed_rank = i;
      }
    }
    if ((result.failed_rank >= 0 || result.interrupted) && !stopping && alive > 0) {
      stopping = true;
      terminate_all(SIGTERM);
      kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(options.kill_grace_s));
    }
    if (stopping && alive > 0 && Clock::now() >= kill_at) terminate_all(SIGKILL);
  }
  // Drain what the ranks wrote before exiting.
  for (int i = 0; i < options.nproc; ++i) {
    Rank& r = ranks[i];
    if (r.out_fd < 0) continue;
    char buf[65536];
    ssize_t n;
    while ((n = ::read(r.out_fd, buf, sizeof(buf))) > 0) r.partial.append(buf, static_cast<std::size_t>(n));
    ::close(r.out_fd);
    r.out_fd = -1;
    std::istringstream lines(r.partial);
    std::string line;
    while (std::getline(lines, line)) {
      if (std::string e = ErrorFromLine(line); !e.empty()) r.outcome.error = e;
      on_line(i, line);
    }
  }
  for (const Rank& r : ranks) result.ranks.push_back(r.outcome);
  if (result.failed_rank >= 0) {
    const RankOutcome& f = result.ranks[result.failed_rank];
    result.exit_code = f.exit_code != 0 ? f.exit_code : 1;
    result.error = "rank " + std::to_string(result.failed_rank) + " " + ExitText(f.exit_code) +
                   (f.error.empty() ? "" : ": " + f.error);
  }
  if (result.exit_code == 0) {
    for (std::size_t i = 0; i < result.ranks.size(); ++i) {
      if (result.ranks[i].exit_code != 0) {  // cannot happen without failed_rank; be safe
        result.exit_code = result.ranks[i].exit_code;
        result.error = "rank " + std::to_string(i) + " " + ExitText(result.exit_code);
        break;
      }
    }
  }
  g_stop_signal = 0;
  return result;
}

}  // namespace trainyard::engine
