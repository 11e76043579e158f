// One controller per port and per data dir, one worker per work dir and per name, end to
// end with the real binaries: a second controller on a busy port or a held data dir, a
// second worker on a held work dir or health port, exit 2 within seconds naming the
// conflict while the first keeps serving; a duplicate worker name is refused with a
// message the duplicate prints; a controller killed with -9 restarts at once on the same
// port and dir. Then the hostile-input pass over every listener and path flag: ports in
// use, a privileged port without the right, an address not on this host, directories
// without permission, a data dir on a read-only filesystem, a path that is a file, and
// lock files left by another host. Each refusal is a precise message and exit status 2,
// and nothing already stored is touched.
//
// Every program that must refuse runs under timeout(1): one that starts instead (as a
// second controller on a shared port used to) is killed after 20 s and fails the test
// with status 124 rather than hanging it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/files.h"
#include "tests/support/http_get.h"
#include "tests/support/ports.h"
#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr int kRefused = 2;

// A socket of this test process listening on 127.0.0.1:port (0: any), as another program
// holding the port would.
class PortHolder {
 public:
  explicit PortHolder(int port = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
  }
  ~PortHolder() { ::close(fd_); }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Every regular file under `dir` with its bytes, to show nothing was changed.
std::map<std::string, std::string> Snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[e.path().string()] = ReadFileOrEmpty(e.path());
  }
  return out;
}

bool CanDropPrivileges() { return ::geteuid() == 0 && fs::exists("/usr/bin/setpriv"); }
// argv run as user nobody (uid and gid 65534, no supplementary groups, no capabilities).
std::vector<std::string> AsNobody(std::vector<std::string> argv) {
  std::vector<std::string> out = {"/usr/bin/setpriv", "--reuid=65534",   "--regid=65534",
                                  "--clear-groups",   "--inh-caps=-all", "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

class ExclusiveTest : public ::testing::Test {
 protected:
  void SetUp() override { cluster_ = std::make_unique<TestCluster>(kBuiltBinaries, "exclusive"); }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->KeepFiles();
  }

  // trainyard-controller with `args`, run to its end under timeout(1).
  CommandResult Controller(const std::vector<std::string>& args, std::vector<std::string> prefix = {}) const {
    std::vector<std::string> argv = std::move(prefix);
    argv.insert(argv.end(), {"/usr/bin/timeout", "20", kBuiltBinaries.controller});
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }
  // trainyard-worker `name` on `work_dir` against the cluster's controller, with `extra`.
  std::vector<std::string> WorkerArgv(const std::string& name, const fs::path& work_dir,
                                      const std::vector<std::string>& extra = {}) const {
    const int base = RendezvousPortBase();
    std::vector<std::string> argv = {kBuiltBinaries.worker,
                                     "--controller",
                                     cluster_->address(),
                                     "--name",
                                     name,
                                     "--slots",
                                     "1",
                                     "--gpus",
                                     "none",
                                     "--work-dir",
                                     work_dir.string(),
                                     "--rendezvous-ports",
                                     std::to_string(base) + "-" + std::to_string(base + 9)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
  CommandResult Worker(const std::vector<std::string>& argv, std::vector<std::string> prefix = {}) const {
    std::vector<std::string> full = std::move(prefix);
    full.insert(full.end(), {"/usr/bin/timeout", "20"});
    full.insert(full.end(), argv.begin(), argv.end());
    return RunCommand(full);
  }
  // The workers `trainyard workers` lists, by name, with their slots.
  std::map<std::string, int> Workers() const {
    std::map<std::string, int> out;
    for (const json& w : JsonLines(cluster_->Cli({"workers", "--output", "json"}).out)) {
      if (w.value("connected", false)) out[w.value("name", "")] = w.value("slots", 0);
    }
    return out;
  }
  fs::path DataDir() const { return cluster_->dir() / "data"; }

  std::unique_ptr<TestCluster> cluster_;
};

// ---- the acceptance cases ----

TEST_F(ExclusiveTest, ASecondControllerOnABusyPortExitsNamingItWhileTheFirstKeepsServing) {
  ASSERT_TRUE(cluster_->StartController()) << "see " << cluster_->dir();
  cluster_->StartWorker(OneSlotWorker("w1"));
  ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 30000));
  const fs::path other = cluster_->dir() / "other-data";
  const CommandResult second = Controller({"--listen", cluster_->address(), "--data-dir", other.string()});
  EXPECT_EQ(second.exit_code, kRefused) << second.err;
  EXPECT_THAT(second.err, HasSubstr("--listen '" + cluster_->address() +
                                    "': cannot listen: address already in use: another process listens on port"));
  EXPECT_FALSE(fs::exists(other)) << "refused before its data dir was made";
  // The first still answers every call (a shared port answered some from the second,
  // which knows no worker).
  for (int i = 0; i < 8; ++i) EXPECT_EQ(Workers(), (std::map<std::string, int>{{"w1", 1}})) << "call " << i;
}

TEST_F(ExclusiveTest, ASecondControllerOnAHeldDataDirExitsNamingTheHolderWhileTheFirstKeepsServing) {
  ASSERT_TRUE(cluster_->StartController()) << "see " << cluster_->dir();
  cluster_->StartWorker(OneSlotWorker("w1"));
  ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 30000));
  const std::map<std::string, std::string> before = Snapshot(DataDir());
  const CommandResult second = Controller({"--listen", "127.0.0.1:0", "--data-dir", DataDir().string()});
  EXPECT_EQ(second.exit_code, kRefused) << second.err;
  EXPECT_THAT(second.err, HasSubstr("--data-dir '" + DataDir().string() + "' is in use by trainyard-controller pid " +
                                    std::to_string(cluster_->controller_pid()) + " on this host ("));
  EXPECT_THAT(second.err, HasSubstr("(lock file " + (DataDir() / "trainyard-controller.lock").string() +
                                    "); stop it first, or give this one another --data-dir"));
  EXPECT_EQ(Snapshot(DataDir()).count((DataDir() / "trainyard.db").string()), 1u);
  EXPECT_EQ(Snapshot(DataDir()).at((DataDir() / "trainyard-controller.lock").string()),
            before.at((DataDir() / "trainyard-controller.lock").string()));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Workers(), (std::map<std::string, int>{{"w1", 1}})) << "call " << i;
}

TEST_F(ExclusiveTest, AControllerKilledWithSigkillRestartsAtOnceOnTheSamePortAndDir) {
  ASSERT_TRUE(cluster_->StartController()) << "see " << cluster_->dir();
  cluster_->StartWorker(OneSlotWorker("w1"));
  ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 30000));
  const int killed = cluster_->controller_pid();
  cluster_->KillController();
  ASSERT_TRUE(cluster_->RestartController()) << ReadFileOrEmpty(cluster_->dir() / "controller-2.log");
  EXPECT_TRUE(cluster_->WaitConnected({"w1"}, 30000)) << "the worker came back to the same address";
  const std::string log = ReadFileOrEmpty(cluster_->dir() / "controller-2.log");
  EXPECT_THAT(log, HasSubstr("the previous trainyard-controller (pid " + std::to_string(killed)));
  EXPECT_THAT(log, HasSubstr("ended without releasing it (killed or crashed); taking over"));
}

TEST_F(ExclusiveTest, AWorkerOnAHeldWorkDirExitsNamingTheHolder) {
  ASSERT_TRUE(cluster_->StartController());
  cluster_->StartWorker(OneSlotWorker("w1"));
  ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 30000));
  const fs::path held = cluster_->dir() / "worker-w1";  // TestCluster's --work-dir for w1
  const CommandResult second = Worker(WorkerArgv("w2", held));
  EXPECT_EQ(second.exit_code, kRefused) << second.err;
  EXPECT_THAT(second.err,
              HasSubstr("trainyard-worker: --work-dir '" + held.string() + "' is in use by trainyard-worker pid "));
  EXPECT_THAT(second.err, HasSubstr("stop it first, or give this one another --work-dir"));
  EXPECT_EQ(Workers(), (std::map<std::string, int>{{"w1", 1}})) << "w2 never registered";
}

// Two machines given one --name: the second is refused with the controller's reason,
// which it prints, and retries; the first keeps the name and its slots.
TEST_F(ExclusiveTest, ADuplicateWorkerNameIsRefusedWithAMessageTheDuplicatePrints) {
  ASSERT_TRUE(cluster_->StartController());
  cluster_->StartWorker(OneSlotWorker("w1"));
  ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 30000));
  std::vector<std::string> argv = WorkerArgv("w1", cluster_->dir() / "duplicate");
  argv[std::find(argv.begin(), argv.end(), "--slots") - argv.begin() + 1] = "3";
  const fs::path log = cluster_->dir() / "duplicate.log";
  TestProcess duplicate(argv, log.string());
  const std::string want =
      "the controller refused to register this worker as w1: ALREADY_EXISTS: register: the name "
      "'w1' is taken by a connected worker (address '127.0.0.1', 1 slot, registered ";
  EXPECT_TRUE(WaitUntil([&] { return ReadFileOrEmpty(log).find(want) != std::string::npos; }, std::chrono::seconds(30)))
      << ReadFileOrEmpty(log);
  const std::string text = ReadFileOrEmpty(log);
  EXPECT_THAT(text, HasSubstr("each worker needs its own --name"));
  EXPECT_EQ(text.find("CANCELLED"), std::string::npos) << text;
  EXPECT_TRUE(ProcessAlive(duplicate.pid())) << "it retries; it does not exit";
  EXPECT_EQ(Workers(), (std::map<std::string, int>{{"w1", 1}})) << "the first keeps the name and its 1 slot";
}

// ---- the hostile-input pass: listeners ----

TEST_F(ExclusiveTest, EveryControllerListenerRefusesAPortInUseBeforeTouchingTheDataDir) {
  PortHolder busy;
  struct Case {
    std::vector<std::string> flags;
    std::string flag;
  };
  for (const Case& c : {Case{{"--listen", busy.address()}, "--listen"},
                        Case{{"--listen", "127.0.0.1:0", "--metrics-listen", busy.address()}, "--metrics-listen"},
                        Case{{"--listen", "127.0.0.1:0", "--web-listen", busy.address()}, "--web-listen"}}) {
    std::vector<std::string> args = c.flags;
    args.insert(args.end(), {"--data-dir", DataDir().string()});
    const CommandResult r = Controller(args);
    EXPECT_EQ(r.exit_code, kRefused) << c.flag << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.flag + " '" + busy.address() +
                                 "': cannot listen: address already in use: another "
                                 "process listens on port " +
                                 std::to_string(busy.port())));
    EXPECT_FALSE(fs::exists(DataDir())) << c.flag << ": the data dir was made before the ports were checked";
  }
  // Two listeners on one port of their own: neither could serve.
  const CommandResult same =
      Controller({"--listen", "127.0.0.1:" + std::to_string(busy.port() + 1), "--metrics-listen",
                  "127.0.0.1:" + std::to_string(busy.port() + 1), "--data-dir", DataDir().string()});
  EXPECT_EQ(same.exit_code, kRefused);
  EXPECT_THAT(same.err,
              HasSubstr("name the same port " + std::to_string(busy.port() + 1) + "; each listener needs its own"));
}

// Two controllers' /metrics (and web UIs) on one port: the second refuses (civetweb's
// own message was "null context when constructing CivetServer").
TEST_F(ExclusiveTest, ASecondControllersMetricsAndWebListenersAreRefusedAndHost0LogsThePortPicked) {
  ASSERT_TRUE(cluster_->StartController({"--metrics-listen", "127.0.0.1:0", "--web-listen", "127.0.0.1:0"}));
  const std::string log = ReadFileOrEmpty(cluster_->dir() / "controller.log");
  const std::size_t at = log.find("metrics on http://127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << log;
  const int metrics_port = std::stoi(log.substr(at + std::string("metrics on http://127.0.0.1:").size()));
  ASSERT_GT(metrics_port, 0);
  EXPECT_THAT(HttpGet(metrics_port, "/metrics"), HasSubstr("trainyard_workers_connected"));
  const std::size_t web_at = log.find("web UI on http://127.0.0.1:");
  ASSERT_NE(web_at, std::string::npos) << log;
  const int web_port = std::stoi(log.substr(web_at + std::string("web UI on http://127.0.0.1:").size()));

  for (const auto& [flag, port] :
       std::vector<std::pair<std::string, int>>{{"--metrics-listen", metrics_port}, {"--web-listen", web_port}}) {
    const std::string address = "127.0.0.1:" + std::to_string(port);
    const CommandResult r =
        Controller({"--listen", "127.0.0.1:0", flag, address, "--data-dir", (cluster_->dir() / "d2").string()});
    EXPECT_EQ(r.exit_code, kRefused) << r.err;
    EXPECT_THAT(r.err, HasSubstr(flag + " '" + address + "': cannot listen: address already in use"));
    EXPECT_EQ(r.err.find("null context"), std::string::npos) << r.err;
  }
  EXPECT_THAT(HttpGet(metrics_port, "/metrics"), HasSubstr("trainyard_workers_connected")) << "the first still serves";
}

TEST_F(ExclusiveTest, AnAddressNotOnThisHostIsRefusedForEveryListener) {
  // 192.0.2.0/24 (TEST-NET-1): .213 is on no interface here. Beyond loopback needs
  // --insecure; with it, the address itself is what is refused.
  for (const std::string flag : {"--listen", "--metrics-listen", "--web-listen"}) {
    std::vector<std::string> args = {"--listen", "127.0.0.1:0", "--insecure", "--data-dir", DataDir().string()};
    if (flag == "--listen") {
      args[1] = "192.0.2.213:7070";
    } else {
      args.insert(args.end(), {flag, "192.0.2.213:9464"});
    }
    const CommandResult r = Controller(args);
    EXPECT_EQ(r.exit_code, kRefused) << flag << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(flag + " '192.0.2.213:")) << flag;
    EXPECT_THAT(r.err, HasSubstr("cannot assign requested address: '192.0.2.213' is not an address of this host"));
  }
  EXPECT_FALSE(fs::exists(DataDir()));
}

TEST_F(ExclusiveTest, APrivilegedPortWithoutTheRightIsRefusedNamingTheRule) {
  if (!CanDropPrivileges()) GTEST_SKIP() << "needs root and setpriv to run the controller as another user";
  int start = 1024;
  std::ifstream("/proc/sys/net/ipv4/ip_unprivileged_port_start") >> start;
  if (start <= 80) GTEST_SKIP() << "net.ipv4.ip_unprivileged_port_start is " << start << ": port 80 is not privileged";
  const CommandResult r =
      Controller({"--listen", "127.0.0.1:80", "--data-dir", "/nonexistent/never-made"}, AsNobody({}));
  EXPECT_EQ(r.exit_code, kRefused) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--listen '127.0.0.1:80': cannot listen: permission denied: ports below 1024 need "
                               "root or CAP_NET_BIND_SERVICE"));
}

TEST_F(ExclusiveTest, AWorkerHealthPortInUseIsRefusedAndTwoWorkersNeverShareOne) {
  ASSERT_TRUE(cluster_->StartController());
  PortHolder busy;
  const CommandResult r = Worker(WorkerArgv("w2", cluster_->dir() / "w2", {"--health-listen", busy.address()}));
  EXPECT_EQ(r.exit_code, kRefused) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--health-listen '" + busy.address() + "': cannot listen: address already in use"));
  EXPECT_FALSE(fs::exists(cluster_->dir() / "w2")) << "refused before its work dir was made";

  // A real worker's health port: gRPC no longer lets a second one share it.
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  WorkerOptions w1 = OneSlotWorker("w1");
  w1.extra_args = {"--health-listen", std::to_string(port)};
  cluster_->StartWorker(w1);
  ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 30000));
  const CommandResult second =
      Worker(WorkerArgv("w3", cluster_->dir() / "w3", {"--health-listen", std::to_string(port)}));
  EXPECT_EQ(second.exit_code, kRefused) << second.err;
  EXPECT_THAT(second.err, HasSubstr("--health-listen '127.0.0.1:" + std::to_string(port) +
                                    "': cannot listen: address already in use"));
}

// ---- the hostile-input pass: paths ----

TEST_F(ExclusiveTest, ADataDirOrWorkDirThatIsAFileIsRefused) {
  const fs::path file = cluster_->dir() / "a-file";
  std::ofstream(file) << "not a directory";
  const CommandResult c = Controller({"--listen", "127.0.0.1:0", "--data-dir", file.string()});
  EXPECT_EQ(c.exit_code, kRefused);
  EXPECT_THAT(c.err, HasSubstr("--data-dir '" + file.string() + "' is not a directory"));
  ASSERT_TRUE(cluster_->StartController());
  const CommandResult w = Worker(WorkerArgv("w1", file));
  EXPECT_EQ(w.exit_code, kRefused);
  EXPECT_THAT(w.err, HasSubstr("--work-dir '" + file.string() + "' is not a directory"));
  EXPECT_EQ(ReadFileOrEmpty(file), "not a directory");
}

TEST_F(ExclusiveTest, DirectoriesWithoutPermissionAreRefusedWithTheReason) {
  if (!CanDropPrivileges()) GTEST_SKIP() << "needs root and setpriv to run as a user the permissions bind";
  const fs::path locked = cluster_->dir() / "root-only";
  fs::create_directories(locked / "existing");
  fs::permissions(locked / "existing", fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                           fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(cluster_->dir(), fs::perms::others_exec | fs::perms::others_read, fs::perm_options::add);
  fs::permissions(locked, fs::perms::owner_all | fs::perms::others_exec | fs::perms::others_read);
  // Not creatable: the parent is root's (0755).
  const CommandResult create =
      Controller({"--listen", "127.0.0.1:0", "--data-dir", (locked / "new").string()}, AsNobody({}));
  EXPECT_EQ(create.exit_code, kRefused) << create.err;
  EXPECT_THAT(create.err, HasSubstr("--data-dir '" + (locked / "new").string() + "': cannot create '" +
                                    (locked / "new").string() + "': permission denied"));
  // There, but not writable.
  const CommandResult existing =
      Controller({"--listen", "127.0.0.1:0", "--data-dir", (locked / "existing").string()}, AsNobody({}));
  EXPECT_EQ(existing.exit_code, kRefused) << existing.err;
  EXPECT_THAT(existing.err, HasSubstr("--data-dir '" + (locked / "existing").string() +
                                      "' is not writable: permission denied; trainyard-controller keeps its files "
                                      "there"));
  ASSERT_TRUE(cluster_->StartController());
  const CommandResult worker = Worker(WorkerArgv("w1", locked / "existing"), AsNobody({}));
  EXPECT_EQ(worker.exit_code, kRefused) << worker.err;
  EXPECT_THAT(worker.err, HasSubstr("--work-dir '" + (locked / "existing").string() +
                                    "' is not writable: permission denied; trainyard-worker keeps its files there"));
  EXPECT_TRUE(fs::is_empty(locked / "existing"));
}

// The controller's other path flags are read (or checked) before the store is touched
// and before anything is served: a --token-file or --policy-file it cannot use, a
// --port-file it could not write, a --tensorboard-dir that is a file. The worker's
// --rank-binary likewise.
TEST_F(ExclusiveTest, OtherPathFlagsAreCheckedBeforeTheStoreIsOpenedOrAnythingServed) {
  const fs::path missing = cluster_->dir() / "no-such-folder" / "file";
  const fs::path bad_policy = cluster_->dir() / "policy.toml";
  std::ofstream(bad_policy) << "[[group]]\nname = \"ml\"\nwieght = 2\n";
  struct Case {
    std::vector<std::string> flags;
    std::string want;
  };
  for (const Case& c :
       {Case{{"--token-file", missing.string()}, missing.string() + ": no such token file"},
        Case{{"--policy-file", bad_policy.string()}, "policy.toml:3: unknown key 'wieght'"},
        Case{{"--port-file", missing.string()},
             "--port-file '" + missing.string() + "': cannot write in '" + missing.parent_path().string() + "': "},
        Case{{"--tensorboard-dir", bad_policy.string()},
             "--tensorboard-dir '" + bad_policy.string() + "': not a directory"}}) {
    std::vector<std::string> args = {"--listen", "127.0.0.1:0", "--data-dir", DataDir().string()};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    const CommandResult r = Controller(args);
    EXPECT_EQ(r.exit_code, kRefused) << c.flags[0] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.want)) << c.flags[0];
    EXPECT_FALSE(fs::exists(DataDir())) << c.flags[0] << ": the data dir was made before the flag was checked";
  }
  ASSERT_TRUE(cluster_->StartController());
  const CommandResult w = Worker(WorkerArgv("w1", cluster_->dir() / "w1", {"--rank-binary", missing.string()}));
  EXPECT_EQ(w.exit_code, kRefused) << w.err;
  EXPECT_THAT(w.err,
              HasSubstr("--rank-binary '" + missing.string() + "': cannot execute it: No such file or directory"));
  EXPECT_FALSE(fs::exists(cluster_->dir() / "w1"));
}

// A data dir holding a store, on a filesystem mounted read-only (a read-only bind mount
// in a mount namespace of its own, so no other process sees it): refused, the store
// byte for byte as it was.
TEST_F(ExclusiveTest, ADataDirOnAReadOnlyFilesystemIsRefusedAndItsStoreUntouched) {
  if (::geteuid() != 0 || !fs::exists("/usr/bin/unshare")) GTEST_SKIP() << "needs root and unshare to mount";
  ASSERT_TRUE(cluster_->StartController());
  cluster_->SignalController(SIGTERM);
  ASSERT_TRUE(WaitUntil([&] { return !ProcessAlive(cluster_->controller_pid()); }, std::chrono::seconds(20)));
  const std::map<std::string, std::string> before = Snapshot(DataDir());
  ASSERT_EQ(before.count((DataDir() / "trainyard.db").string()), 1u);
  const std::string d = DataDir().string();
  const CommandResult r = RunCommand(
      {"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
       "mount --bind \"$1\" \"$1\" && mount -o remount,bind,ro \"$1\" && exec /usr/bin/timeout 20 \"$2\" --listen "
       "127.0.0.1:0 --data-dir \"$1\"",
       "sh", d, kBuiltBinaries.controller});
  if (r.exit_code != kRefused && r.err.find("mount") != std::string::npos &&
      r.err.find("trainyard") == std::string::npos) {
    GTEST_SKIP() << "cannot mount here: " << r.err;
  }
  EXPECT_EQ(r.exit_code, kRefused) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--data-dir '" + d + "' is not writable: read-only file system"));
  EXPECT_EQ(Snapshot(DataDir()), before) << "a file of the store changed";
}

// A lock file whose record names another host: held (the directory shared over a
// network filesystem with a live controller there), the refusal says it is another host
// and how to clear a dead one's lock; not held (that controller died, or the directory
// moved here), it is taken over and the log says whose it was.
TEST_F(ExclusiveTest, ALockFileLeftByAnotherHostIsReportedAsSuch) {
  fs::create_directories(DataDir());
  const fs::path lock = DataDir() / "trainyard-controller.lock";
  const std::string record = "pid 123\nhost node-7\nstarted 2026-06-01T08:00:00Z\nprogram trainyard-controller\n";
  {
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, record.data(), record.size()), static_cast<ssize_t>(record.size()));
    ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    const CommandResult held = Controller({"--listen", "127.0.0.1:0", "--data-dir", DataDir().string()});
    ::close(fd);
    EXPECT_EQ(held.exit_code, kRefused) << held.err;
    EXPECT_THAT(held.err, HasSubstr("is in use by trainyard-controller pid 123 on host node-7, not this host ("));
    EXPECT_THAT(held.err, HasSubstr("since 2026-06-01T08:00:00Z (lock file " + lock.string() +
                                    "): the directory is shared with that host. If node-7 is gone (a network "
                                    "filesystem can keep a dead host's lock for a while), remove " +
                                    lock.string() + " and start again"));
    EXPECT_EQ(ReadFileOrEmpty(lock), record) << "the holder's record was overwritten";
    EXPECT_FALSE(fs::exists(DataDir() / "trainyard.db")) << "the store was created under a held lock";
  }
  ASSERT_TRUE(cluster_->StartController()) << ReadFileOrEmpty(cluster_->dir() / "controller.log");
  EXPECT_THAT(ReadFileOrEmpty(cluster_->dir() / "controller.log"),
              HasSubstr("the previous trainyard-controller (pid 123 on host node-7, started 2026-06-01T08:00:00Z) "
                        "ended without releasing it (killed or crashed); taking over"));
}

}  // namespace
}  // namespace trainyard::testing
