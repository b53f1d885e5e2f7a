// Compression states of a routed expert's tensor in the cache (ZipMoE §3.2, Fig. 6; style.md table).
//   kMiss: nothing cached — read E-chunks and SM-chunk, decode, recover
//   kE:    E-chunks (compressed exponents) cached — read SM-chunk, decode, recover
//   kS:    SM-chunk cached — read E-chunks, decode, recover
//   kC:    E-chunks and SM-chunk cached ("compressed") — decode, recover
//   kF:    full BF16 tensor cached — nothing to do
// Printed as M/E/S/C/F. Pools are named after the state they hold (F, C, S, E).
#pragma once

#include <cstdint>

namespace zipmoe {

enum class CompressionState : uint8_t { kMiss = 0, kE = 1, kS = 2, kC = 3, kF = 4 };

inline char CompressionStateLetter(CompressionState s) {
  switch (s) {
    case CompressionState::kMiss: return 'M';
    case CompressionState::kE: return 'E';
    case CompressionState::kS: return 'S';
    case CompressionState::kC: return 'C';
    case CompressionState::kF: return 'F';
  }
  return '?';
}

// Whether the SM-chunk must be read from storage (Type-I task, ZipMoE §3.3) / E-chunks read / decoded.
inline bool NeedsSmRead(CompressionState s) { return s == CompressionState::kMiss || s == CompressionState::kE; }
inline bool NeedsERead(CompressionState s) { return s == CompressionState::kMiss || s == CompressionState::kS; }
inline bool NeedsDecode(CompressionState s) { return s != CompressionState::kF; }

}  // namespace zipmoe
