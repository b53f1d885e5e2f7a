// Small helpers shared by the `zipmoe` subcommands (argument parsing).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace zipmoe::cli {

// "512MiB", "1.5GB", "4096", "64k": B, K/KB = 1e3, KiB = 2^10, M/MB, MiB, G/GB, GiB, T/TB, TiB.
// Errors: kInvalidArgument naming `flag` and the text.
Result<uint64_t> ParseByteSize(const std::string& text, const std::string& flag);

}  // namespace zipmoe::cli
