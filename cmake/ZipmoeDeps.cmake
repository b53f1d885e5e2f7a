# Third-party dependencies, all from Debian packages (scripts/install_deps.sh installs them).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
find_package(FlatBuffers REQUIRED)   # flatbuffers::flatbuffers(_shared), flatbuffers::flatc
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
pkg_check_modules(LZ4 REQUIRED IMPORTED_TARGET liblz4)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)      # tokenizer pre-tokenizer regexes
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)   # tokenizer NFC/NFKC, categories
if(ZIPMOE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(ZIPMOE_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
