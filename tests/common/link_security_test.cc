// Tests for common/ipc/link_security: which endpoints need CURVE (known answers for each mode), the
// mode's parsing, key generation, and the key file: round trip with mode 0600 and no temp file left,
// a missing / loose / malformed / inconsistent file is an error naming the file, and racing creators
// all end up with the one key that was linked into place.
#include "common/ipc/link_security.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "tests/test_util.h"

namespace zipmoe::messaging {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

TEST(LinkSecurityTest, EndpointNeedsCurveKnownAnswers) {
  const auto needs = [](const char* endpoint, LinkSecurityMode mode) { return EndpointNeedsCurve(endpoint, mode); };
  constexpr LinkSecurityMode kAuto = LinkSecurityMode::kAuto;
  EXPECT_TRUE(needs("tcp://10.0.0.5:5555", kAuto));
  EXPECT_FALSE(needs("tcp://127.0.0.1:1", kAuto));
  EXPECT_FALSE(needs("tcp://[::1]:1", kAuto));
  EXPECT_FALSE(needs("ipc:///tmp/zipmoe/scheduler.sock", kAuto));
  EXPECT_FALSE(needs("inproc://scheduler", kAuto));
  EXPECT_FALSE(needs("tcp://localhost:7000", kAuto));
  EXPECT_FALSE(needs("tcp://127.8.9.10:7000", kAuto));           // all of 127/8 is loopback
  EXPECT_FALSE(needs("tcp://[::ffff:127.0.0.1]:7000", kAuto));    // IPv4-mapped loopback
  EXPECT_FALSE(needs("tcp://10.0.0.5:0;127.0.0.1:7000", kAuto));  // source address; judged by the host
  EXPECT_TRUE(needs("tcp://*:5555", kAuto));                      // a wildcard bind reaches every interface
  EXPECT_TRUE(needs("tcp://0.0.0.0:5555", kAuto));
  EXPECT_TRUE(needs("tcp://[fe80::1]:5555", kAuto));
  EXPECT_TRUE(needs("tcp://eth0:5555", kAuto));                   // an interface name
  EXPECT_TRUE(needs("tcp://scheduler.example:5555", kAuto));
  EXPECT_TRUE(needs("tcp://128.0.0.1:5555", kAuto));
  // on: every tcp://, loopback too; still never ipc:// or inproc://.
  EXPECT_TRUE(needs("tcp://127.0.0.1:1", LinkSecurityMode::kOn));
  EXPECT_TRUE(needs("tcp://[::1]:1", LinkSecurityMode::kOn));
  EXPECT_FALSE(needs("ipc:///tmp/a.sock", LinkSecurityMode::kOn));
  EXPECT_FALSE(needs("inproc://a", LinkSecurityMode::kOn));
  // off: nothing.
  EXPECT_FALSE(needs("tcp://10.0.0.5:5555", LinkSecurityMode::kOff));
  EXPECT_TRUE(IsLoopbackTcp("tcp://127.0.0.1:*"));
  EXPECT_FALSE(IsLoopbackTcp("tcp://[::1"));  // malformed: not loopback, so auto secures it
}

TEST(LinkSecurityTest, ParseModeAcceptsTheThreeNamesAndNamesTheKey) {
  for (const LinkSecurityMode mode : {LinkSecurityMode::kAuto, LinkSecurityMode::kOn, LinkSecurityMode::kOff}) {
    auto parsed = ParseLinkSecurityMode(LinkSecurityModeName(mode), "link_security.mode");
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, mode);
  }
  auto bad = ParseLinkSecurityMode("yes", "link_security.mode");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("link_security.mode = 'yes'"));
}

TEST(LinkSecurityTest, GeneratedPairsAreZ85AndDistinct) {
  auto a = GenerateCurveKeyPair();
  auto b = GenerateCurveKeyPair();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->public_key.size(), 40u);
  EXPECT_EQ(a->secret_key.size(), 40u);
  EXPECT_NE(a->public_key, b->public_key);
  EXPECT_NE(a->secret_key, b->secret_key);
  EXPECT_NE(a->public_key, a->secret_key);
}

TEST(LinkSecurityTest, KeyFileRoundTripsWithMode0600AndNoTempFileLeft) {
  TempDir tmp;
  const std::string path = tmp.Sub("link.key");
  auto keys = GenerateCurveKeyPair();
  ASSERT_TRUE(keys.ok());
  ASSERT_TRUE(SaveCurveKeyFile(path, *keys).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto loaded = LoadCurveKeyFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->public_key, keys->public_key);
  EXPECT_EQ(loaded->secret_key, keys->secret_key);
  // Replacing keeps the mode and leaves only the key file.
  auto other = GenerateCurveKeyPair();
  ASSERT_TRUE(SaveCurveKeyFile(path, *other).ok());
  EXPECT_EQ(LoadCurveKeyFile(path)->secret_key, other->secret_key);
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(tmp.path())) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "link.key");
  }
  EXPECT_EQ(files, 1u);
  // A save into a folder that does not exist is an I/O error naming the path.
  const Status st_missing = SaveCurveKeyFile(tmp.Sub("no/such/dir/link.key"), *keys);
  EXPECT_EQ(st_missing.code(), StatusCode::kIoError);
  EXPECT_THAT(st_missing.message(), HasSubstr(tmp.Sub("no/such/dir/link.key")));
}

TEST(LinkSecurityTest, MissingLooseAndMalformedKeyFilesAreErrorsNamingTheFile) {
  TempDir tmp;
  auto keys = GenerateCurveKeyPair();
  ASSERT_TRUE(keys.ok());
  const std::string missing = tmp.Sub("none.key");
  auto r = LoadCurveKeyFile(missing);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr(missing));

  const std::string loose = tmp.Sub("loose.key");
  ASSERT_TRUE(SaveCurveKeyFile(loose, *keys).ok());
  ASSERT_EQ(::chmod(loose.c_str(), 0644), 0);
  r = LoadCurveKeyFile(loose);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr(loose));
  EXPECT_THAT(r.status().message(), HasSubstr("0644"));

  auto other = GenerateCurveKeyPair();
  const std::string good_public = "    public-key = \"" + keys->public_key + "\"\n";
  const std::string good_secret = "    secret-key = \"" + keys->secret_key + "\"\n";
  const struct {
    const char* name;
    std::string text;
    const char* says;
  } cases[] = {
      {"empty.key", "", "no public-key"},
      {"no_secret.key", "curve\n" + good_public, "no secret-key"},
      {"short.key", "curve\n" + good_public + "    secret-key = \"abc\"\n", "secret-key is not 40 Z85 characters"},
      {"unquoted.key", "curve\n" + good_public + "    secret-key = " + keys->secret_key + "\n",
       "secret-key is not 40 Z85 characters"},
      {"mismatch.key", "curve\n    public-key = \"" + other->public_key + "\"\n" + good_secret,
       "not the secret-key's public key"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = tmp.Sub(c.name);
    testing::WriteAll(path, c.text);
    ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
    r = LoadCurveKeyFile(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
    EXPECT_THAT(r.status().message(), HasSubstr(path));
    EXPECT_THAT(r.status().message(), HasSubstr(c.says));
  }
  // A character outside Z85's alphabet ('~' is not one of its 85) in a key of the right length.
  const std::string bad_char = tmp.Sub("bad_char.key");
  std::string secret = keys->secret_key;
  secret[7] = '~';
  testing::WriteAll(bad_char, "curve\n" + good_public + "    secret-key = \"" + secret + "\"\n");
  ASSERT_EQ(::chmod(bad_char.c_str(), 0600), 0);
  r = LoadCurveKeyFile(bad_char);
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(r.status().message(), HasSubstr("secret-key is not 40 Z85 characters"));
  EXPECT_THAT(r.status().message(), HasSubstr(bad_char));
}

TEST(LinkSecurityTest, LoadOrCreateCreatesOnceAndRacingCallersShareOneKey) {
  TempDir tmp;
  const std::string path = tmp.Sub("link.key");
  bool created = false;
  auto first = LoadOrCreateCurveKeyFile(path, &created);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(created);
  auto again = LoadOrCreateCurveKeyFile(path, &created);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(created);
  EXPECT_EQ(again->secret_key, first->secret_key);

  const std::string raced = tmp.Sub("raced.key");
  constexpr int kThreads = 8;
  std::vector<std::string> secrets(kThreads);
  std::vector<int> creators(kThreads, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      bool made = false;
      auto keys = LoadOrCreateCurveKeyFile(raced, &made);
      if (keys.ok()) secrets[i] = keys->secret_key;
      creators[i] = made ? 1 : 0;
    });
  }
  for (std::thread& t : threads) t.join();
  int n_creators = 0;
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(secrets[i], secrets[0]) << i;
    n_creators += creators[i];
  }
  EXPECT_EQ(n_creators, 1);
  EXPECT_EQ(LoadCurveKeyFile(raced)->secret_key, secrets[0]);
}

}  // namespace
}  // namespace zipmoe::messaging
