// Crash-safe compress (issue 43 item 4; services/convert/compress_journal.h): a compress killed at any
// moment is resumed per expert tensor by the same command and ends byte-identical to an uninterrupted
// run; other inputs or options start over; a write error (a full disk) removes the partial work and
// leaves nothing at OUT_DIR.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "common/file_util.h"
#include "services/convert/compress.h"
#include "services/convert/compress_journal.h"
#include "services/convert/verify.h"
#include "tests/test_util.h"

namespace zipmoe::convert {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// 144 expert tensors (4 layers x 16 experts x 3, MLA attention).
std::string Model() { return testing::CachedSynth("--arch deepseek_v2 --preset tiny --seed 7"); }

// Slow enough that random kill points land inside the expert loop: one thread, zstd at its highest
// level, 16 E-chunks per tensor (a journal record per tensor, synced every 4).
const std::vector<std::string> kArgs = {"--threads", "1", "--level", "22", "--shards", "16"};

CompressOptions Options(const std::string& model, const std::string& out) {
  CompressOptions o;
  o.model_dir = model;
  o.out_dir = out;
  o.codec.level = 22;
  o.n_shards = 16;
  o.n_threads = 1;
  return o;
}

// Every regular file under `dir` by relative path, with its bytes.
std::map<std::string, std::string> Files(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = testing::ReadAll(e.path().string());
  return out;
}

void ExpectSameFiles(const std::string& want, const std::string& got, const std::string& what) {
  const auto a = Files(want), b = Files(got);
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, bytes] : a) {
    auto it = b.find(name);
    ASSERT_NE(it, b.end()) << what << ": " << name << " missing";
    EXPECT_TRUE(it->second == bytes) << what << ": " << name << " differs";
  }
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// `zipmoe compress model out <kArgs> <extra>` as a child process with stdout+stderr in `log`; an
// RLIMIT_FSIZE of `fsize_limit` bytes (writes beyond it fail with EFBIG; SIGXFSZ ignored) unless 0.
pid_t Spawn(const std::string& model, const std::string& out, const std::string& log,
            const std::vector<std::string>& extra = {}, rlim_t fsize_limit = 0) {
  std::vector<std::string> args = {testing::CliPath(), "compress", model, out};
  args.insert(args.end(), kArgs.begin(), kArgs.end());
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {  // async-signal-safe calls only until exec
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (fsize_limit != 0) {
      ::signal(SIGXFSZ, SIG_IGN);  // stays ignored across exec
      const rlimit lim{fsize_limit, fsize_limit};
      ::setrlimit(RLIMIT_FSIZE, &lim);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

int Wait(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Runs CompressModel(o) in a forked child that SIGKILLs itself once `n` tensors are journaled (the
// progress callback runs right after each window's journal records are synced): a kill at an exact
// point. o.n_threads 1 keeps the parent free of threads at the fork.
void KillAfter(const CompressOptions& o, int64_t n) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    (void)CompressModel(o, [n](const CompressProgress& p) {
      if (p.tensors_done >= n) ::raise(SIGKILL);
    });
    ::_exit(0);
  }
  ASSERT_EQ(Wait(pid), 128 + SIGKILL) << "not killed after " << n << " tensors";
}

// The N in "resuming OUT: N of M expert tensors already written", or 0.
int Resumed(const std::string& log) {
  std::smatch m;
  static const std::regex re("resuming .*: ([0-9]+) of ([0-9]+) expert tensors already written");
  return std::regex_search(log, m, re) ? std::stoi(m[1]) : 0;
}

// SIGKILL at random moments of a CLI compress, then the same command to completion: every file of
// the result byte-identical to an uninterrupted run's and `verify` passes. ZIPMOE_COMPRESS_KILL_POINTS
// (default 5) sets the number of kills; each is reported (docs/reliability.md has a 20-kill run).
TEST(CompressResume, KilledAtRandomMomentsResumesToIdenticalBytes) {
  const std::string model = Model();
  TempDir tmp;
  // Reference, and when (after the start) its expert loop wrote the first bytes and its output appeared:
  // the kills spread over that span and a little either side.
  const std::string ref = tmp.Sub("ref");
  auto t0 = std::chrono::steady_clock::now();
  const pid_t ref_pid = Spawn(model, ref, tmp.Sub("ref.log"));
  double first = 0, done = 0;
  std::error_code ec;
  while (done == 0) {
    if (first == 0 && fs::file_size(ref + ".partial/" + kExpertsFileName, ec) > 0 && !ec) first = Seconds(t0);
    if (FileExists(ref)) done = Seconds(t0);
    if (::waitpid(ref_pid, nullptr, WNOHANG) == ref_pid) break;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  ASSERT_GT(done, 0) << testing::ReadAll(tmp.Sub("ref.log"));
  if (first == 0 || first > done) first = done / 2;
  const char* env = std::getenv("ZIPMOE_COMPRESS_KILL_POINTS");
  const int points = env && *env ? std::atoi(env) : 5;
  const uintmax_t experts_bytes = fs::file_size(ref + "/" + kExpertsFileName, ec);
  ASSERT_FALSE(ec) << ref << "/" << kExpertsFileName;
  std::mt19937 rng(std::random_device{}());
  int mid_run = 0, resumed_total = 0, identical = 0;
  for (int i = 0; i < points; ++i) {
    // Stratified over [0.8 first, done + 10 ms): just before the first tensor, in the expert loop,
    // while writing dense.safetensors / manifest.bin, around the rename. A moment inside the reference's
    // expert loop becomes a share of its experts file (the kill lands once the run has written that
    // much), so that these kills land in the loop however much slower a run is than the reference
    // (a fresh-clone CI run beside other tests: five kills by the clock, none in the loop).
    const double lo = 0.8 * first, hi = done + 0.01;
    const double at = lo + (hi - lo) * (i + std::uniform_real_distribution<double>(0, 1)(rng)) / points;
    const bool in_loop = at > first && at < done;
    const uintmax_t kill_bytes = in_loop ? static_cast<uintmax_t>(static_cast<double>(experts_bytes) *
                                                                  std::clamp((at - first) / (done - first), 0.2, 0.9))
                                         : 0;
    const std::string out = tmp.Sub("c" + std::to_string(i));
    const pid_t pid = Spawn(model, out, tmp.Sub("kill.log"));
    if (in_loop) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      // Until it has written that much, or has exited (WNOWAIT: left for Wait below to reap).
      const auto exited = [pid] {
        siginfo_t info{};
        return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
      };
      while (std::chrono::steady_clock::now() < deadline && !exited()) {
        std::error_code size_ec;
        if (fs::file_size(out + ".partial/" + kExpertsFileName, size_ec) >= kill_bytes && !size_ec) break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    } else {
      std::this_thread::sleep_for(std::chrono::duration<double>(at));
    }
    ::kill(pid, SIGKILL);
    const int killed = Wait(pid);
    const bool partial = FileExists(out + ".partial");
    // Killed after the rename (or not killed at all: it had exited): the output is complete as it is.
    const bool complete = FileExists(out);
    t0 = std::chrono::steady_clock::now();
    const int rc = complete ? 0 : Wait(Spawn(model, out, tmp.Sub("resume.log")));
    const double rerun = Seconds(t0);
    const std::string log = complete ? "" : testing::ReadAll(tmp.Sub("resume.log"));
    ASSERT_EQ(rc, 0) << log;
    const int resumed = Resumed(log);
    if (resumed > 0 && resumed < 144) ++mid_run;
    resumed_total += resumed;
    std::printf("kill %d at %.3f s (expert loop %.3f-%.3f s): %s, %s; rerun %.3f s, %d of 144 tensors resumed\n", i,
                at, first, done, killed == 128 + SIGKILL ? "killed" : "had exited",
                complete ? "OUT complete" : partial ? "OUT.partial left" : "nothing left", rerun, resumed);
    ExpectSameFiles(ref, out, fmt::format("kill {} at {:.3f} s", i, at));
    identical += Files(ref) == Files(out) ? 1 : 0;
    EXPECT_FALSE(FileExists(out + ".partial"));
    auto verified = VerifyCompressed({model, out, 2});
    EXPECT_TRUE(verified.ok()) << verified.status().ToString();
    ASSERT_TRUE(RemoveTree(out).ok());
  }
  std::printf("%d kills, %d inside the expert loop, %d tensors resumed in all, %d outputs byte-identical\n", points,
              mid_run, resumed_total, identical);
  EXPECT_GT(mid_run, 0) << "no kill landed inside the expert loop";
}

// Kills after exactly N tensors (KillAfter), for a
// deterministic spread; the in-process rerun resumes N and ends byte-identical.
TEST(CompressResume, KilledAfterNTensorsResumesExactlyThere) {
  const std::string model = Model();
  TempDir tmp;
  ASSERT_TRUE(CompressModel(Options(model, tmp.Sub("ref"))).ok());
  for (int n : {4, 72, 144}) {
    const std::string out = tmp.Sub("c" + std::to_string(n));
    KillAfter(Options(model, out), n);
    ASSERT_TRUE(FileExists(out + ".partial/compress.journal"));
    EXPECT_FALSE(FileExists(out));
    auto s = CompressModel(Options(model, out));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->resumed_tensors, n);
    ExpectSameFiles(tmp.Sub("ref"), out, fmt::format("killed after {}", n));
  }
}

// A torn journal record or a damaged chunk: the rerun keeps the tensors before it and rewrites the rest.
TEST(CompressResume, DamagedTailIsWrittenAgain) {
  const std::string model = Model();
  TempDir tmp;
  ASSERT_TRUE(CompressModel(Options(model, tmp.Sub("ref"))).ok());
  for (const char* damage : {"torn journal", "flipped chunk byte"}) {
    const std::string out = tmp.Sub("c");
    KillAfter(Options(model, out), 40);
    const std::string journal = out + ".partial/compress.journal", experts = out + ".partial/experts.bin";
    if (std::string(damage) == "torn journal") {
      fs::resize_file(journal, fs::file_size(journal) - 5);  // the last record (tensor 39) torn
    } else {
      std::string bytes = testing::ReadAll(experts);
      bytes[bytes.size() - 1] ^= 0x40;  // the last chunk of tensor 39
      testing::WriteAll(experts, bytes);
    }
    auto s = CompressModel(Options(model, out));
    ASSERT_TRUE(s.ok()) << damage << ": " << s.status().ToString();
    EXPECT_EQ(s->resumed_tensors, 39) << damage;
    ExpectSameFiles(tmp.Sub("ref"), out, damage);
    ASSERT_TRUE(RemoveTree(out).ok());
  }
}

// Other options or a changed input file between the killed run and the rerun: it starts over, says
// why, and the result equals a fresh run with the new settings.
TEST(CompressResume, OtherOptionsOrInputsStartOver) {
  TempDir tmp;
  fs::copy(Model(), tmp.Sub("m"));
  const std::string model = tmp.Sub("m");
  const auto kill_after_40 = [&](const std::string& out) {
    KillAfter(Options(model, out), 40);
  };
  // --level 3 instead of 22.
  kill_after_40(tmp.Sub("c"));
  CompressOptions level3 = Options(model, tmp.Sub("c"));
  level3.codec.level = 3;
  ::testing::internal::CaptureStderr();
  auto s = CompressModel(level3);
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->resumed_tensors, 0);
  EXPECT_NE(said.find("level 22"), std::string::npos) << said;
  EXPECT_NE(said.find("starting over"), std::string::npos) << said;
  level3.out_dir = tmp.Sub("fresh3");
  ASSERT_TRUE(CompressModel(level3).ok());
  ExpectSameFiles(tmp.Sub("fresh3"), tmp.Sub("c"), "level changed");

  // The thread count is not part of the fingerprint: 2 threads resume a 1-thread run.
  kill_after_40(tmp.Sub("t"));
  CompressOptions two = Options(model, tmp.Sub("t"));
  two.n_threads = 2;
  s = CompressModel(two);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->resumed_tensors, 40);

  // The weights file touched (a new mtime): start over.
  kill_after_40(tmp.Sub("d"));
  const std::string weights = model + "/model.safetensors";
  fs::last_write_time(weights, fs::last_write_time(weights) + std::chrono::seconds(1));
  ::testing::internal::CaptureStderr();
  s = CompressModel(Options(model, tmp.Sub("d")));
  const std::string said2 = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->resumed_tensors, 0);
  EXPECT_NE(said2.find("model.safetensors"), std::string::npos) << said2;
  ExpectSameFiles(tmp.Sub("t"), tmp.Sub("d"), "input touched");
}

// A second compress of the same OUT_DIR while one runs fails without touching the first one's work.
TEST(CompressResume, ASecondCompressOfTheSameOutputIsRefused) {
  TempDir tmp;
  auto holder = CompressWorkDir::Open(tmp.Sub("c.partial"), "fingerprint", {});
  ASSERT_TRUE(holder.ok()) << holder.status().ToString();
  auto s = CompressModel(Options(Model(), tmp.Sub("c")));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable) << s.status().ToString();
  EXPECT_TRUE(FileExists(tmp.Sub("c.partial/compress.journal")));
}

// A full disk, simulated by RLIMIT_FSIZE (writes past 1 MB fail with EFBIG, the same write-error path
// as ENOSPC; a real full tmpfs is in docs/reliability.md): a non-zero exit, an error naming the file
// and the work directory, nothing at OUT_DIR and no temporary directory left.
TEST(CompressResume, AFullDiskFailsCleanly) {
  const std::string model = Model();
  TempDir tmp;
  const std::string out = tmp.Sub("out/c");
  ASSERT_TRUE(CreateDirectories(tmp.Sub("out")).ok());
  const int rc = Wait(Spawn(model, out, tmp.Sub("log"), {}, 1 << 20));
  const std::string log = testing::ReadAll(tmp.Sub("log"));
  EXPECT_EQ(rc, 1) << log;
  EXPECT_NE(log.find(out + ".partial/experts.bin"), std::string::npos) << log;
  EXPECT_NE(log.find("File too large"), std::string::npos) << log;
  EXPECT_NE(log.find("removed the partial output " + out + ".partial"), std::string::npos) << log;
  EXPECT_TRUE(Entries(tmp.Sub("out")).empty()) << fmt::format("{}", fmt::join(Entries(tmp.Sub("out")), ", "));
}

}  // namespace
}  // namespace zipmoe::convert
