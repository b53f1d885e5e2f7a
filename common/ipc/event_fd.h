// EventFd: a Linux eventfd used to wake a zmq_poll loop from other threads (a zmq_pollitem_t with
// socket = nullptr and fd = EventFd::fd()). Notify() from any thread; the loop calls Drain() when the
// fd is readable. Thread-safe.
#pragma once

#include "common/file_util.h"
#include "common/status.h"

namespace zipmoe {

class EventFd {
 public:
  static Result<EventFd> Create();  // kIoError naming errno
  void Notify() const;              // never blocks
  void Drain() const;               // resets the counter; never blocks
  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
};

}  // namespace zipmoe
