// Worker fencing (worker_fence.h).
#include "services/links/worker_fence.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace zipmoe::runtime {

using std::chrono::milliseconds;

// A worker that stopped heart-beating while holding ops may only be stalled (SIGSTOP, a long
// page-in), not dead: once its ops are re-issued and their arena slots recycled, it could wake up
// and write into slots handed to someone else. Before its ops are re-issued it is fenced: when its
// process is visible here (same host and pid namespace: `zipmoe up`; compose with `pid: host`) and
// is the zipmoe service it announced (`zipmoe service ROLE ...`, not this process), it is SIGKILLed
// and this waits (at most 2 s) until the kernel has torn it down (no /proc entry, or a zombie), so
// none of its writes can follow; its supervisor restarts it. Returns a phrase for the log.
std::string FenceWorker(int32_t pid, const std::string& role) {
  if (pid <= 0 || pid == ::getpid()) return "not fenced (runs in this process or sent no pid)";
  const std::string proc = fmt::format("/proc/{}", pid);
  std::ifstream cmd(proc + "/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  for (std::string arg; std::getline(cmd, arg, '\0');) argv.push_back(arg);
  if (argv.size() < 3) return fmt::format("not fenced: pid {} is not visible from this process", pid);
  const std::string exe = argv[0].substr(argv[0].find_last_of('/') + 1);
  if (exe.rfind("zipmoe", 0) != 0 || argv[1] != "service" || argv[2] != role)
    return fmt::format("not fenced: pid {} is not a `zipmoe service {}` process", pid, role);
  if (::kill(pid, SIGKILL) != 0 && errno != ESRCH) return fmt::format("not fenced: kill({}): errno {}", pid, errno);
  for (int i = 0; i < 1000; ++i) {
    std::ifstream stat(proc + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');
    if (!stat || paren == std::string::npos || paren + 2 >= text.size()) return "SIGKILLed and gone (fenced)";
    const char state = text[paren + 2];
    if (state == 'Z' || state == 'X') return "SIGKILLed and gone (fenced)";
    std::this_thread::sleep_for(milliseconds(2));
  }
  return "SIGKILLed, still exiting after 2 s";
}

bool ProcessStopped(int32_t pid) {
  if (pid <= 0 || pid == ::getpid()) return false;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (!stat || paren == std::string::npos || paren + 2 >= text.size()) return false;
  return text[paren + 2] == 'T' || text[paren + 2] == 't';
}

}  // namespace zipmoe::runtime
