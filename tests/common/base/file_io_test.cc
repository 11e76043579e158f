// The base library's file helpers (common/base/file_io.h): capped whole-file reads
// against hostile files, and writes that appear complete or not at all.
#include "common/base/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace trainyard {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "file_io_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::string Slurp(const std::string& path) const {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string dir_;
};

TEST_F(FileIoTest, ReadsUpToTheCapAndRefusesOneByteMore) {
  std::ofstream(Path("exact"), std::ios::binary) << std::string(100, 'a');
  EXPECT_EQ(ReadFile(Path("exact"), 100).value(), std::string(100, 'a'));
  absl::StatusOr<std::string> over = ReadFile(Path("exact"), 99);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("larger than the limit of 99 bytes"));
  std::ofstream(Path("empty"));
  EXPECT_EQ(ReadFile(Path("empty"), 0).value(), "");
  // Binary content, NUL bytes included, comes back as it is.
  std::ofstream(Path("binary"), std::ios::binary) << std::string("a\0\xff\n", 4);
  EXPECT_EQ(ReadFile(Path("binary"), 4).value(), std::string("a\0\xff\n", 4));
}

TEST_F(FileIoTest, ReadErrorsSayWhatIsWrongWithoutThePath) {
  absl::StatusOr<std::string> missing = ReadFile(Path("nope"), 10);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "no such file");
  absl::StatusOr<std::string> dir = ReadFile(dir_, 10);
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(dir.status().message(), "is a directory");
  if (::geteuid() != 0) {  // root reads anything
    std::ofstream(Path("secret")) << "x";
    ::chmod(Path("secret").c_str(), 0);
    EXPECT_EQ(ReadFile(Path("secret"), 10).status().code(), absl::StatusCode::kInternal);
  }
}

TEST_F(FileIoTest, ReadsFilesWhoseSizeTheKernelDoesNotKnow) {
  // /proc files report size 0; the cap is applied to what is read, not to st_size.
  absl::StatusOr<std::string> self = ReadFile("/proc/self/status", 1 << 20);
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_THAT(*self, HasSubstr("Name:"));
  EXPECT_EQ(ReadFile("/proc/self/status", 8).status().code(), absl::StatusCode::kOutOfRange);
}

TEST_F(FileIoTest, AnAtomicWriteReplacesTheFileAndLeavesNoTemporary) {
  std::ofstream(Path("f")) << "old";
  ASSERT_TRUE(WriteFileAtomically(Path("f"), "new contents").ok());
  EXPECT_EQ(Slurp(Path("f")), "new contents");
  EXPECT_EQ(Entries(), std::vector<std::string>{"f"});
  ASSERT_TRUE(WriteFileAtomically(Path("f"), "").ok());  // empty is a valid file
  EXPECT_EQ(Slurp(Path("f")), "");
}

TEST_F(FileIoTest, AWriterThatIsNotCommittedLeavesTheOldFileAndRemovesItsTemporary) {
  std::ofstream(Path("f")) << "old";
  {
    absl::StatusOr<AtomicFileWriter> w = AtomicFileWriter::Create(Path("f"));
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(w->Append("half of the new").ok());
    EXPECT_EQ(w->temp_path(), Path("f") + ".tmp");
    EXPECT_TRUE(fs::exists(w->temp_path()));
    EXPECT_EQ(Slurp(Path("f")), "old");
  }
  EXPECT_EQ(Slurp(Path("f")), "old");
  EXPECT_EQ(Entries(), std::vector<std::string>{"f"});
}

TEST_F(FileIoTest, UniqueTemporaryNamesAreHiddenAndDistinct) {
  absl::StatusOr<AtomicFileWriter> a = AtomicFileWriter::Create(Path("x.json"), {/*unique_temp_name=*/true});
  absl::StatusOr<AtomicFileWriter> b = AtomicFileWriter::Create(Path("x.json"), {/*unique_temp_name=*/true});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->temp_path(), b->temp_path());
  EXPECT_THAT(fs::path(a->temp_path()).filename().string(), ::testing::StartsWith(".x.json.tmp-"));
  ASSERT_TRUE(a->Append("a").ok());
  ASSERT_TRUE(b->Append("bb").ok());
  ASSERT_TRUE(a->Commit().ok());
  ASSERT_TRUE(b->Commit().ok());
  EXPECT_EQ(Slurp(Path("x.json")), "bb");  // the last commit wins, whole
  EXPECT_EQ(Entries(), std::vector<std::string>{"x.json"});
}

TEST_F(FileIoTest, FilesGetTheModeAPlainCreateWould) {
  const mode_t old = ::umask(022);
  ASSERT_TRUE(WriteFileAtomically(Path("plain"), "x").ok());
  ASSERT_TRUE(WriteFileAtomically(Path("unique"), "x", {/*unique_temp_name=*/true}).ok());
  ::umask(old);
  struct stat a {}, b {};
  ASSERT_EQ(::stat(Path("plain").c_str(), &a), 0);
  ASSERT_EQ(::stat(Path("unique").c_str(), &b), 0);
  EXPECT_EQ(a.st_mode & 0777, 0644u);
  EXPECT_EQ(b.st_mode & 0777, 0644u);
}

TEST_F(FileIoTest, FailuresNameThePathAndWritingAfterCommitIsRefused) {
  absl::Status no_dir = WriteFileAtomically(Path("missing/f"), "x");
  EXPECT_EQ(no_dir.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(no_dir.message()), HasSubstr(Path("missing/f") + ".tmp"));
  // A directory where the file should be: the rename fails and nothing is left behind.
  fs::create_directory(Path("d"));
  fs::create_directory(Path("d/inside"));
  EXPECT_FALSE(WriteFileAtomically(Path("d"), "x").ok());
  EXPECT_EQ(Entries(), std::vector<std::string>{"d"});
  absl::StatusOr<AtomicFileWriter> w = AtomicFileWriter::Create(Path("g"));
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Commit().ok());
  EXPECT_EQ(w->Append("late").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(w->Commit().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(FileIoTest, RenameDurablyAndMakeDirectories) {
  ASSERT_TRUE(MakeDirectories(Path("a/b/c")).ok());
  ASSERT_TRUE(MakeDirectories(Path("a/b/c")).ok());  // again: nothing to do
  std::ofstream(Path("a/b/c/part")) << "bytes";
  ASSERT_TRUE(RenameDurably(Path("a/b/c/part"), Path("a/final")).ok());
  EXPECT_EQ(Slurp(Path("a/final")), "bytes");
  EXPECT_FALSE(fs::exists(Path("a/b/c/part")));
  EXPECT_FALSE(RenameDurably(Path("a/b/c/part"), Path("a/final2")).ok());
  std::ofstream(Path("file")) << "x";
  EXPECT_FALSE(MakeDirectories(Path("file/sub")).ok());
  EXPECT_EQ(DirectoryOf("/a/b"), "/a");
  EXPECT_EQ(DirectoryOf("/a"), "/");
  EXPECT_EQ(DirectoryOf("a"), ".");
}

}  // namespace
}  // namespace trainyard
