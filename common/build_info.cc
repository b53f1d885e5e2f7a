#include "common/build_info.h"

// Set by common/CMakeLists.txt on this file only (set_source_files_properties); the fallbacks
// keep the file compilable outside that build.
#ifndef ZIPMOE_BUILD_VERSION
#define ZIPMOE_BUILD_VERSION "0.0.0"
#endif
#ifndef ZIPMOE_BUILD_COMMIT
#define ZIPMOE_BUILD_COMMIT "unknown"
#endif
#ifndef ZIPMOE_BUILD_TYPE
#define ZIPMOE_BUILD_TYPE ""
#endif
#ifndef ZIPMOE_BUILD_CUDA
#define ZIPMOE_BUILD_CUDA ""
#endif

namespace zipmoe {

const BuildInfo& GetBuildInfo() {
  static const BuildInfo info{ZIPMOE_BUILD_VERSION, ZIPMOE_BUILD_COMMIT, ZIPMOE_BUILD_TYPE, ZIPMOE_BUILD_CUDA};
  return info;
}

std::string BuildInfoString() {
  const BuildInfo& info = GetBuildInfo();
  std::string out = "zipmoe " + info.version + " (commit " + info.commit;
  if (!info.build_type.empty()) out += ", " + info.build_type;
  out += info.cuda.empty() ? std::string(", no CUDA") : ", CUDA " + info.cuda;
  return out + ")";
}

}  // namespace zipmoe
