// Internal to kernels/*.cu: the two spellings of CUDA C++ that a C++ compiler cannot read, behind macros,
// so that tests/kernels/cuda_emulation (a CPU emulation of the CUDA subset these units use, whose
// cuda_runtime.h defines both macros first) compiles the same units with g++ and runs their kernels and
// launchers in ctest on machines without a GPU. With nvcc they are exactly the CUDA syntax:
//   ZIPMOE_CUDA_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...)
//       = kernel<<<grid, block, shared_bytes, stream>>>(args...)
//   ZIPMOE_DYNAMIC_SHARED(T, name);  = extern __shared__ T name[];  (the launch's dynamic shared memory)
#pragma once

#include <cuda_runtime.h>

#ifndef ZIPMOE_CUDA_LAUNCH
#define ZIPMOE_CUDA_LAUNCH(kernel, grid, block, shared_bytes, stream) kernel<<<grid, block, shared_bytes, stream>>>
#endif
#ifndef ZIPMOE_DYNAMIC_SHARED
#define ZIPMOE_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif
