// kernels/device_memory.cu and kernels/host_registration.cu on the CUDA emulation: the arena's path to the
// recovery kernel (register a host range, take its device alias, recover from the planes in place) and the
// executor's copy / query helpers, which zipmoe_kernels_tests can only check for kUnavailable without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "common/bitfield.h"
#include "kernels/device_memory.h"
#include "kernels/host_registration.h"
#include "kernels/recovery.h"

#include <cuda_runtime.h>

namespace zipmoe::kernels {
namespace {

TEST(DeviceMemoryEmulatedTest, RecoveryReadsRegisteredHostPlanesInPlaceThroughTheAlias) {
  const int64_t n = 4099;  // vec16 groups, a tail
  std::vector<uint16_t> bf16(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) bf16[static_cast<size_t>(i)] = static_cast<uint16_t>(i * 2654435761u >> 7);
  // One host "arena": the E plane then the SM plane, as a staging slot holds them.
  std::vector<uint8_t> arena(static_cast<size_t>(2 * n + 64));
  uint8_t* e = arena.data();
  uint8_t* sm = arena.data() + n + 61;  // not 16-aligned relative to e: the vec4 or scalar path
  SplitBf16(bf16.data(), n, e, sm);
  EXPECT_EQ(DeviceAliasOf(e), nullptr);  // pageable
  uint16_t* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, sizeof(uint16_t) * static_cast<size_t>(n)), cudaSuccess);
  {
    auto reg = HostRegistration::Register(arena.data(), arena.size());
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    ASSERT_NE(reg->device_ptr(), nullptr);
    EXPECT_EQ(DeviceAliasOf(sm), reg->DevicePointerOf(sm));
    const auto* d_e = static_cast<const uint8_t*>(DeviceAliasOf(e));
    const auto* d_sm = static_cast<const uint8_t*>(DeviceAliasOf(sm));
    ASSERT_TRUE(LaunchRecoverBf16(d_e, d_sm, out, n, nullptr).ok());
    ASSERT_TRUE(SynchronizeStream(nullptr).ok());
    std::vector<uint16_t> got(static_cast<size_t>(n));
    ASSERT_TRUE(CopyAsync(got.data(), out, sizeof(uint16_t) * got.size(), nullptr).ok());
    EXPECT_EQ(got, bf16);
  }  // unregistered here
  EXPECT_EQ(DeviceAliasOf(sm), nullptr);
  // A kernel given the pageable planes: on a GPU an illegal address (asynchronous, the context's); the
  // emulation refuses the launch, so the launcher reports it at once.
  const Status st = LaunchRecoverBf16(e, sm, out, n, nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("illegal memory access"), std::string::npos) << st.ToString();
  cudaFree(out);
}

TEST(DeviceMemoryEmulatedTest, RegistrationRefusesOverlapsAndEmptyRanges) {
  std::vector<uint8_t> buf(1024);
  auto a = HostRegistration::Register(buf.data(), 512);
  ASSERT_TRUE(a.ok());
  auto b = HostRegistration::Register(buf.data() + 256, 512);  // overlaps a
  EXPECT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInternal) << b.status().ToString();
  EXPECT_EQ(HostRegistration::Register(buf.data(), 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->DevicePointerOf(buf.data() + 512), nullptr);  // one past the range
}

TEST(DeviceMemoryEmulatedTest, QueryDeviceReportsTheEmulatedDiscreteDevice) {
  auto p = QueryDevice();
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FALSE(p->integrated);
  EXPECT_GT(p->total_bytes, 0u);
  EXPECT_LE(p->free_bytes, p->total_bytes);
  EXPECT_TRUE(BuiltWithCuda());
  EXPECT_EQ(CudaDeviceCount(), 1);
}

TEST(DeviceMemoryEmulatedTest, CopyAsyncChecksItsArguments) {
  std::vector<uint8_t> host(64);
  std::iota(host.begin(), host.end(), 0);
  uint8_t* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64), cudaSuccess);
  EXPECT_TRUE(CopyAsync(d, host.data(), 64, nullptr).ok());
  EXPECT_TRUE(CopyAsync(d, host.data(), 0, nullptr).ok());
  EXPECT_EQ(CopyAsync(nullptr, host.data(), 8, nullptr).code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> back(64);
  ASSERT_TRUE(CopyAsync(back.data(), d, 64, nullptr).ok());
  EXPECT_EQ(back, host);
  cudaFree(d);
}

}  // namespace
}  // namespace zipmoe::kernels
