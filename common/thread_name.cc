#include "common/thread_name.h"

#include <pthread.h>

namespace zipmoe {

void SetCurrentThreadName(const std::string& name) {
  const std::string cut = name.substr(0, 15);
  (void)pthread_setname_np(pthread_self(), cut.c_str());
}

}  // namespace zipmoe
