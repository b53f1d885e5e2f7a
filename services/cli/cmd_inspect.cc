// `zipmoe inspect COMPRESSED_DIR [--json]`: sizes, ratio and entropy bound from manifest.bin.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "services/cli/commands.h"
#include "services/convert/inspect.h"

namespace zipmoe::cli {

void AddInspectCommand(CLI::App& app, int* exit_code) {
  struct Args {
    std::string dir;
    bool json = false;
  };
  auto args = std::make_shared<Args>();  // shared: owned by the callback
  CLI::App* cmd = app.add_subcommand("inspect", "Summarise a compressed directory");
  cmd->add_option("COMPRESSED_DIR", args->dir, "output of `zipmoe compress`")->required();
  cmd->add_flag("--json", args->json, "print one JSON object");
  cmd->callback([args, exit_code] {
    auto j = convert::InspectCompressed(args->dir);
    if (!j.ok()) {
      fmt::print(stderr, "error: {}\n", j.status().ToString());
      *exit_code = 1;
      return;
    }
    if (args->json) {
      fmt::print("{}\n", j->dump());
      return;
    }
    const auto& v = j.value();
    fmt::print("{}: arch {}, codec {} level {}, K={} shards\n", args->dir, v["arch"].get<std::string>(),
               v["codec"].get<std::string>(), v["level"].get<int>(), v["shards"].get<int>());
    fmt::print("  expert tensors  {} in {} layers ({} chunks); dense tensors {}\n", v["tensors"].get<int64_t>(),
               v["per_layer"].size(), v["chunks"].get<int64_t>(), v["dense_tensors"].get<int64_t>());
    fmt::print("  expert bytes    {:.2f} MB raw -> {:.2f} MB stored (ratio {:.4f}; experts.bin {:.2f} MB)\n",
               v["expert_bytes_raw"].get<double>() / 1e6, v["expert_bytes_stored"].get<double>() / 1e6,
               v["ratio"].get<double>(), v["experts_file_bytes"].get<double>() / 1e6);
    fmt::print("  exponent plane  {:.3f} bits/value stored, Shannon entropy {:.3f} bits -> bound ratio {:.4f}\n",
               v["e_bits_per_value"].get<double>(), v["exponent_entropy_bits"].get<double>(),
               v["entropy_bound_ratio"].get<double>());
    for (const auto& d : v["dtypes"]) {
      const bool mxfp4 = d["dtype"].get<std::string>() == "MXFP4";
      // MXFP4: the block scales (a byte per 32 values) are compressed in an E-chunk of their own.
      const std::string scales =
          mxfp4 ? fmt::format(" + scale entropy {:.3f} bits / 32 (scales {} -> {} bytes stored)",
                              d.value("scale_entropy_bits", 0.0), d.value("scale_bytes_raw", int64_t{0}),
                              d.value("scale_bytes_stored", int64_t{0}))
                : std::string();
      fmt::print("  {:<5} experts    {} tensors, ratio {:.4f}; {:g} SM bits + exponent entropy {:.3f} bits{} -> bound "
                 "ratio {:.4f}{}\n",
                 d["dtype"].get<std::string>(), d["tensors"].get<int64_t>(), d["ratio"].get<double>(),
                 d["sm_bits_per_value"].get<double>(), d["exponent_entropy_bits"].get<double>(), scales,
                 d["entropy_bound_ratio"].get<double>(),
                 d.value("e_chunks_raw", 0) > 0
                     ? fmt::format("; {} tensors' E-chunks stored raw (the codec did not shrink them)",
                                   d["e_chunks_raw"].get<int64_t>())
                     : std::string());
    }
  });
}

}  // namespace zipmoe::cli
