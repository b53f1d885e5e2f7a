// The cache pools (ZipMoE §3.2, §3.4 "Pool Dispatching"), in hierarchy order F ≺ C ≺ S ≺ E: the one
// numbering the cache manager (CachePlan rows, arena slot classes), the planner (its per-pool
// arrays, Λ) and the metrics share. Ranks past the last pool form the Miss "pool" M.
//   F: full BF16 tensors;  C: E-chunks + SM-chunks ("compressed");  S: SM-chunks only;  E: E-chunks only.
#pragma once

#include <cstdint>

namespace zipmoe::cache_manager {

enum class Pool : uint8_t { kF = 0, kC = 1, kS = 2, kE = 3 };
inline constexpr int kPoolCount = 4;
inline constexpr Pool kPoolOrder[kPoolCount] = {Pool::kF, Pool::kC, Pool::kS, Pool::kE};
inline constexpr char kPoolLetters[kPoolCount + 1] = "FCSE";

// The pool's index in every std::array<…, kPoolCount> (its enum value).
constexpr int PoolIndex(Pool p) { return static_cast<int>(p); }
// The same indices by name, for the planner's arrays.
inline constexpr int kPoolF = PoolIndex(Pool::kF);
inline constexpr int kPoolC = PoolIndex(Pool::kC);
inline constexpr int kPoolS = PoolIndex(Pool::kS);
inline constexpr int kPoolE = PoolIndex(Pool::kE);

}  // namespace zipmoe::cache_manager
