// Untrusted text (common/base/text.h): what a message may show of hostile input, and
// UTF-8 as proto3 strings need it.
#include "common/base/text.h"

#include <gtest/gtest.h>

#include "common/base/free_port.h"

namespace trainyard {
namespace {

TEST(QuoteTest, EscapesEverythingThatIsNotPrintableAscii) {
  EXPECT_EQ(Quote("plain text"), "plain text");
  EXPECT_EQ(Quote("a\"b\\c"), "a\\\"b\\\\c");
  EXPECT_EQ(Quote(std::string("nul\0line\nesc\x1b[2J", 16)), "nul\\x00line\\x0aesc\\x1b[2J");
  EXPECT_EQ(Quote("\xc3\xa9"), "\\xc3\\xa9");  // bytes, not characters
  EXPECT_EQ(Quoted("x y"), "'x y'");
  EXPECT_EQ(Quote(""), "");
}

TEST(QuoteTest, LongInputIsCutWithItsLengthNoted) {
  const std::string long_text(5000, 'z');
  const std::string q = Quote(long_text);
  EXPECT_EQ(q, std::string(kMaxQuotedBytes, 'z') + "...(5000 bytes)");
  EXPECT_EQ(Quote(std::string(kMaxQuotedBytes, 'z')), std::string(kMaxQuotedBytes, 'z'));
  EXPECT_EQ(Clip("{\"a\":1}"), "{\"a\":1}");
  EXPECT_EQ(Clip(std::string(150, 'j')), std::string(kMaxQuotedBytes, 'j') + "...");
}

TEST(Utf8Test, AcceptsWellFormedAndRefusesEveryMalformedKind) {
  EXPECT_TRUE(IsUtf8(""));
  EXPECT_TRUE(IsUtf8("ascii"));
  EXPECT_TRUE(IsUtf8("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));  // é € 😀
  EXPECT_TRUE(IsUtf8("\xf4\x8f\xbf\xbf"));                       // U+10FFFF
  EXPECT_FALSE(IsUtf8("\xff"));                                  // never a lead byte
  EXPECT_FALSE(IsUtf8("\x80"));                                  // a lone continuation
  EXPECT_FALSE(IsUtf8("\xc3"));                                  // truncated
  EXPECT_FALSE(IsUtf8("\xe2\x82"));                              // truncated
  EXPECT_FALSE(IsUtf8("\xc0\xaf"));                              // overlong '/'
  EXPECT_FALSE(IsUtf8("\xe0\x80\xaf"));                          // overlong
  EXPECT_FALSE(IsUtf8("\xed\xa0\x80"));                          // surrogate U+D800
  EXPECT_FALSE(IsUtf8("\xf4\x90\x80\x80"));                      // past U+10FFFF
}

TEST(Utf8Test, ValidCopyReplacesEachBadByteAndKeepsTheRest) {
  EXPECT_EQ(ToValidUtf8("ok \xc3\xa9"), "ok \xc3\xa9");
  EXPECT_EQ(ToValidUtf8("a\xff" "b"), "a\xef\xbf\xbd" "b");
  EXPECT_EQ(ToValidUtf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_TRUE(IsUtf8(ToValidUtf8("\xe2\x82\xed\xa0\x80\xf4\x90\x80\x80 tail")));
}

TEST(CountedTest, SingularOnlyForOne) {
  EXPECT_EQ(Counted(1, "slot"), "1 slot");
  EXPECT_EQ(Counted(2, "slot"), "2 slots");
  EXPECT_EQ(Counted(0, "GPU"), "0 GPUs");
  EXPECT_EQ(Counted(-1, "slot"), "-1 slots");
  EXPECT_EQ(Counted(1, "process", "processes"), "1 process");
  EXPECT_EQ(Counted(3, "process", "processes"), "3 processes");
}

TEST(FreePortTest, GivesABindableLoopbackPort) {
  absl::StatusOr<int> a = FreeLoopbackPort();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GT(*a, 0);
  EXPECT_LT(*a, 65536);
}

}  // namespace
}  // namespace trainyard
