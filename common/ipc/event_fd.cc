#include "common/ipc/event_fd.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

namespace zipmoe {

Result<EventFd> EventFd::Create() {
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return Status::IoError(fmt::format("eventfd: {}", std::strerror(errno)));
  EventFd e;
  e.fd_ = UniqueFd(fd);
  return e;
}

void EventFd::Notify() const {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(fd_.get(), &one, sizeof(one));  // EAGAIN: already signalled
}

void EventFd::Drain() const {
  uint64_t value = 0;
  [[maybe_unused]] const ssize_t n = ::read(fd_.get(), &value, sizeof(value));
}

}  // namespace zipmoe
