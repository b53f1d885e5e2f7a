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
pkg_check_modules(ZMQ REQUIRED libzmq)                             # ZeroMQ transport (common/ipc/messaging_channel.h)
find_path(CPPZMQ_INCLUDE_DIR zmq.hpp zmq_addon.hpp REQUIRED)       # cppzmq: header-only C++ binding (cppzmq-dev)
# zipmoe_zmq: libzmq + the cppzmq headers. Not PkgConfig::ZMQ: libzmq.pc's Cflags add the include
# dirs of its private dependencies (krb5, pgm, libxml2) to every target, and none is needed.
add_library(zipmoe_zmq INTERFACE)
target_include_directories(zipmoe_zmq SYSTEM INTERFACE ${CPPZMQ_INCLUDE_DIR} ${ZMQ_INCLUDEDIR})
target_link_libraries(zipmoe_zmq INTERFACE ${ZMQ_LINK_LIBRARIES})
# cpp-httplib (libcpp-httplib-dev, `zipmoe serve`): Debian ships it compiled (libcpp-httplib.so) with
# OpenSSL, zlib and Brotli support, and those macros change the layout of httplib::Request, so every
# includer must define them too; the OpenSSL headers are then needed (libssl-dev), not its libraries.
find_path(HTTPLIB_INCLUDE_DIR httplib.h REQUIRED)
find_library(HTTPLIB_LIBRARY cpp-httplib REQUIRED)
find_package(OpenSSL REQUIRED)
add_library(zipmoe_httplib INTERFACE)
target_include_directories(zipmoe_httplib SYSTEM INTERFACE ${HTTPLIB_INCLUDE_DIR} ${OPENSSL_INCLUDE_DIR})
target_compile_definitions(zipmoe_httplib INTERFACE CPPHTTPLIB_OPENSSL_SUPPORT CPPHTTPLIB_ZLIB_SUPPORT
                                                    CPPHTTPLIB_BROTLI_SUPPORT)
target_link_libraries(zipmoe_httplib INTERFACE ${HTTPLIB_LIBRARY} Threads::Threads)
# GNU libmicrohttpd (libmicrohttpd-dev, the HTTP server of `zipmoe serve`, services/api/http_server.h):
# one event thread for every connection, so a slow client costs a buffer, not a thread (issue 37).
find_path(MICROHTTPD_INCLUDE_DIR microhttpd.h REQUIRED)
find_library(MICROHTTPD_LIBRARY microhttpd REQUIRED)
add_library(zipmoe_microhttpd INTERFACE)
target_include_directories(zipmoe_microhttpd SYSTEM INTERFACE ${MICROHTTPD_INCLUDE_DIR})
target_link_libraries(zipmoe_microhttpd INTERFACE ${MICROHTTPD_LIBRARY} Threads::Threads)
find_package(prometheus-cpp REQUIRED CONFIG)   # 1.0.1; prometheus-cpp::core, ::pull (common/metrics_server.h)
if(ZIPMOE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(ZIPMOE_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
