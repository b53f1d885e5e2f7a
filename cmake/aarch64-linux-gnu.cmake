# Cross-compilation to AArch64 Linux (the Jetson's CPU) with Debian's cross toolchain
# (g++-aarch64-linux-gnu); binaries run on the build machine under qemu-user (qemu-user-static),
# which CMake/CTest use as CMAKE_CROSSCOMPILING_EMULATOR. Used by tests/kernels/aarch64/run.sh:
#   cmake -S tests/kernels/aarch64 -B <dir> -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Target headers and libraries come only from the cross sysroot; programs (qemu) from the host.
set(ZIPMOE_AARCH64_SYSROOT /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH ${ZIPMOE_AARCH64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# -L: where qemu finds the AArch64 dynamic loader and shared libraries (libc, libstdc++).
find_program(ZIPMOE_QEMU_AARCH64 qemu-aarch64-static)
if(NOT ZIPMOE_QEMU_AARCH64)
  set(ZIPMOE_QEMU_AARCH64 qemu-aarch64-static)
endif()
set(CMAKE_CROSSCOMPILING_EMULATOR ${ZIPMOE_QEMU_AARCH64} -L ${ZIPMOE_AARCH64_SYSROOT})
