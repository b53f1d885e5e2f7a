# zipmoe_add_service_library(<name>): library zipmoe_<name> from services/<name>/*.cc, linking
# zipmoe_common and zipmoe_kernels (torch-free). An empty folder yields an INTERFACE library so the
# build and the test suites stay valid while a service is being written. services/<name>/service.cc,
# the service's process entry, is not part of it (zipmoe_add_service_process).
function(zipmoe_add_service_library name)
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  list(FILTER sources EXCLUDE REGEX "/service\\.cc$")
  if(sources)
    add_library(zipmoe_${name} STATIC ${sources})
    target_link_libraries(zipmoe_${name} PUBLIC zipmoe_common zipmoe_kernels)
    target_compile_options(zipmoe_${name} PRIVATE -O3)
  else()
    add_library(zipmoe_${name} INTERFACE)
    target_link_libraries(zipmoe_${name} INTERFACE zipmoe_common zipmoe_kernels)
  endif()
endfunction()

# zipmoe_add_service_process(<name> <libraries...>): library zipmoe_<name>_service from
# services/<name>/service.cc, the process entry of `zipmoe service <name>` (services/<name>/service.h),
# linking zipmoe_<name>, the process helpers (zipmoe_service_base), the per-service metrics and
# <libraries>. A target of its own so that the service's library stays below services/runtime, which
# the process entries compose (zipmoe_runtime links zipmoe_scheduler and zipmoe_cache_manager).
function(zipmoe_add_service_process name)
  add_library(zipmoe_${name}_service STATIC ${CMAKE_CURRENT_SOURCE_DIR}/service.cc)
  target_link_libraries(zipmoe_${name}_service PUBLIC zipmoe_${name} zipmoe_service_base zipmoe_service_metrics
                                                      zipmoe_metrics ${ARGN})
  target_include_directories(zipmoe_${name}_service PUBLIC ${CMAKE_SOURCE_DIR})
endfunction()
