// What this binary is: the project version, the git commit it was built from, the build type and
// whether (and with which CUDA toolkit) its kernels were compiled for CUDA. Printed by
// `zipmoe --version`; exported as the labels of the zipmoe_build_info gauge.
//
// The values are fixed when common/build_info.cc is compiled: CMake computes them at configure time
// (common/CMakeLists.txt) and passes them to that one file only, so a new commit recompiles one file.
// Immutable; GetBuildInfo() is safe from any thread.
#pragma once

#include <string>

namespace zipmoe {

struct BuildInfo {
  std::string version;     // project(zipmoe VERSION ...) of the top-level CMakeLists.txt, e.g. "0.1.0"
  std::string commit;      // `git rev-parse --short HEAD` at configure time, or -DZIPMOE_GIT_COMMIT=...;
                           // "unknown" outside a git checkout (e.g. a docker build without .git)
  std::string build_type;  // CMAKE_BUILD_TYPE ("Release", "Debug", ...), "" when none was set
  std::string cuda;        // CUDA toolkit version the kernels were compiled with ("12.6.85"); "" = no CUDA
};

// The build's info (a static, constructed on first use).
const BuildInfo& GetBuildInfo();

// One line for `zipmoe --version`, e.g. "zipmoe 0.1.0 (commit 9e66c53, Release, CUDA 12.6.85)" or
// "zipmoe 0.1.0 (commit unknown, Release, no CUDA)".
std::string BuildInfoString();

}  // namespace zipmoe
