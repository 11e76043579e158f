// DirLock: one holder per directory, named in the refusal (pid, host, start time), the
// record cleared on a clean release and reported when a holder died holding it, a lock
// held from another host said to be so, and directories it cannot use refused with the
// reason. The "other process" is this one through a second open file description, which
// flock(2) treats exactly as another process.
#include "common/base/dir_lock.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/time/time.h"
#include "tests/support/temp_dir.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
namespace fs = std::filesystem;

const absl::Time kStarted = absl::FromUnixSeconds(1781258400);  // 2026-06-12T10:00:00Z

// Holds an flock on `path` with `record` written in it, as a process of another host
// sharing the directory would.
class ForeignHolder {
 public:
  ForeignHolder(const std::string& path, const std::string& record) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(::write(fd_, record.data(), record.size()), static_cast<ssize_t>(record.size()));
    EXPECT_EQ(::flock(fd_, LOCK_EX | LOCK_NB), 0);
  }
  ~ForeignHolder() { ::close(fd_); }

 private:
  int fd_ = -1;
};

TEST(DirLockTest, CreatesTheDirectoryAndRecordsItsHolder) {
  testing::TempDir tmp;
  const std::string dir = tmp.path() + "/a/b/data";
  auto lock = DirLock::Acquire(dir, "--data-dir", "trainyard-controller", kStarted);
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_EQ((*lock)->path(), dir + "/trainyard-controller.lock");
  EXPECT_FALSE((*lock)->previous().has_value());
  const std::optional<DirLock::Holder> holder = DirLock::ReadHolder((*lock)->path());
  ASSERT_TRUE(holder.has_value());
  EXPECT_EQ(holder->pid, ::getpid());
  EXPECT_EQ(holder->host, DirLock::ThisHost());
  EXPECT_EQ(holder->started, "2026-06-12T10:00:00Z");
  EXPECT_EQ(holder->program, "trainyard-controller");
}

TEST(DirLockTest, ASecondHolderIsRefusedNamingTheFirst) {
  testing::TempDir tmp;
  auto first = DirLock::Acquire(tmp.path(), "--data-dir", "trainyard-controller", kStarted);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = DirLock::Acquire(tmp.path(), "--data-dir", "trainyard-controller", kStarted);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(),
            "--data-dir '" + tmp.path() + "' is in use by trainyard-controller pid " + std::to_string(::getpid()) +
                " on this host (" + DirLock::ThisHost() + ") since 2026-06-12T10:00:00Z (lock file " + tmp.path() +
                "/trainyard-controller.lock); stop it first, or give this one another --data-dir");
  // Another program's lock in the same directory is another file.
  EXPECT_TRUE(DirLock::Acquire(tmp.path(), "--work-dir", "trainyard-worker", kStarted).ok());
}

TEST(DirLockTest, ACleanReleaseLetsTheNextTakeItWithNoPreviousHolder) {
  testing::TempDir tmp;
  {
    auto first = DirLock::Acquire(tmp.path(), "--work-dir", "trainyard-worker", kStarted);
    ASSERT_TRUE(first.ok()) << first.status();
  }
  EXPECT_FALSE(DirLock::ReadHolder(tmp.path() + "/trainyard-worker.lock").has_value()) << "emptied on release";
  auto next = DirLock::Acquire(tmp.path(), "--work-dir", "trainyard-worker", kStarted);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_FALSE((*next)->previous().has_value());
}

// kill -9 leaves the record but not the lock: the next holder takes it at once and says
// whom it took it from (here a record naming another host, as after a pod moved).
TEST(DirLockTest, ARecordUnderAFreeLockIsAHolderThatDiedAndIsTakenOver) {
  testing::TempDir tmp;
  std::ofstream(tmp.path() + "/trainyard-controller.lock")
      << "pid 4242\nhost old-node\nstarted 2026-01-02T03:04:05Z\nprogram trainyard-controller\n";
  auto lock = DirLock::Acquire(tmp.path(), "--data-dir", "trainyard-controller", kStarted);
  ASSERT_TRUE(lock.ok()) << lock.status();
  ASSERT_TRUE((*lock)->previous().has_value());
  EXPECT_EQ((*lock)->previous()->pid, 4242);
  EXPECT_EQ((*lock)->previous()->host, "old-node");
  EXPECT_EQ((*lock)->previous()->started, "2026-01-02T03:04:05Z");
  EXPECT_EQ(DirLock::ReadHolder((*lock)->path())->pid, ::getpid()) << "the record is this process's now";
}

TEST(DirLockTest, ALockHeldFromAnotherHostSaysSoAndHowToClearIt) {
  testing::TempDir tmp;
  const std::string path = tmp.path() + "/trainyard-controller.lock";
  ForeignHolder holder(path, "pid 123\nhost node-7\nstarted 2026-06-01T08:00:00Z\nprogram trainyard-controller\n");
  auto lock = DirLock::Acquire(tmp.path(), "--data-dir", "trainyard-controller", kStarted);
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().message(),
            "--data-dir '" + tmp.path() + "' is in use by trainyard-controller pid 123 on host node-7, not this host (" +
                DirLock::ThisHost() + "), since 2026-06-01T08:00:00Z (lock file " + path +
                "): the directory is shared with that host. If node-7 is gone (a network filesystem can keep a dead "
                "host's lock for a while), remove " + path + " and start again");
}

TEST(DirLockTest, AHolderThatWroteNoRecordYetIsStillRefused) {
  testing::TempDir tmp;
  ForeignHolder holder(tmp.path() + "/trainyard-worker.lock", "");
  auto lock = DirLock::Acquire(tmp.path(), "--work-dir", "trainyard-worker", kStarted);
  ASSERT_FALSE(lock.ok());
  EXPECT_THAT(std::string(lock.status().message()), HasSubstr("is in use by another process (its lock file"));
}

// Hostile records (control bytes, a huge line) are quoted and cut, never echoed whole.
TEST(DirLockTest, AHostileRecordIsQuotedInTheRefusal) {
  testing::TempDir tmp;
  const std::string path = tmp.path() + "/trainyard-worker.lock";
  ForeignHolder holder(path, "pid 7\nhost evil\x1b[31m\nstarted " + std::string(5000, 'x') + "\n");
  auto lock = DirLock::Acquire(tmp.path(), "--work-dir", "trainyard-worker", kStarted);
  ASSERT_FALSE(lock.ok());
  const std::string message(lock.status().message());
  EXPECT_THAT(message, HasSubstr("host evil\\x1b[31m"));
  EXPECT_EQ(message.find('\x1b'), std::string::npos);
  EXPECT_LT(message.size(), 1200u);
}

TEST(DirLockTest, PathsItCannotUseAreRefusedWithTheReason) {
  testing::TempDir tmp;
  const std::string file = tmp.path() + "/plain";
  std::ofstream(file) << "x";
  auto not_dir = DirLock::Acquire(file, "--data-dir", "trainyard-controller", kStarted);
  ASSERT_FALSE(not_dir.ok());
  EXPECT_EQ(not_dir.status().message(), "--data-dir '" + file + "' is not a directory");
  auto under_file = DirLock::Acquire(file + "/sub", "--data-dir", "trainyard-controller", kStarted);
  ASSERT_FALSE(under_file.ok());
  EXPECT_THAT(std::string(under_file.status().message()), StartsWith("--data-dir '" + file + "/sub': "));
  EXPECT_THAT(std::string(under_file.status().message()), HasSubstr("not a directory"));
  // A symlink planted where the lock file goes is not followed.
  const std::string dir = tmp.path() + "/d";
  fs::create_directories(dir);
  fs::create_symlink(file, dir + "/trainyard-worker.lock");
  auto link = DirLock::Acquire(dir, "--work-dir", "trainyard-worker", kStarted);
  ASSERT_FALSE(link.ok());
  EXPECT_THAT(std::string(link.status().message()), HasSubstr("cannot open its lock file " + dir + "/trainyard-worker.lock: "));
  std::ifstream in(file);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "x") << "the symlink's target was written";
}

}  // namespace
}  // namespace trainyard
