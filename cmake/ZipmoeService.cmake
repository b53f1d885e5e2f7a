# zipmoe_add_service_library(<name>): library zipmoe_<name> from services/<name>/*.cc, linking
# zipmoe_common and zipmoe_kernels (torch-free). An empty folder yields an INTERFACE library so the
# build and the test suites stay valid while a service is being written. The service's process entry
# lives apart, in services/processes/ (zipmoe_add_service_process).
function(zipmoe_add_service_library name)
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  if(sources)
    add_library(zipmoe_${name} STATIC ${sources})
    target_link_libraries(zipmoe_${name} PUBLIC zipmoe_common zipmoe_kernels)
    target_compile_options(zipmoe_${name} PRIVATE -O3)
  else()
    add_library(zipmoe_${name} INTERFACE)
    target_link_libraries(zipmoe_${name} INTERFACE zipmoe_common zipmoe_kernels)
  endif()
endfunction()

# zipmoe_add_service_process(<name> <libraries...>), called from services/processes/: library
# zipmoe_<name>_service from services/processes/<name>_service.cc, the process entry of `zipmoe
# service <name>` (services/processes/<name>_service.h), linking zipmoe_<name>, the process helpers
# (zipmoe_service_base), the per-service metrics and <libraries>. The entries sit on the top floor,
# above services/pipeline, services/links, services/service_base, the executor and the API that they compose (docs/architecture.md "Layers").
function(zipmoe_add_service_process name)
  add_library(zipmoe_${name}_service STATIC ${CMAKE_CURRENT_SOURCE_DIR}/${name}_service.cc)
  target_link_libraries(zipmoe_${name}_service PUBLIC zipmoe_${name} zipmoe_service_base zipmoe_service_metrics
                                                      zipmoe_metrics ${ARGN})
  target_include_directories(zipmoe_${name}_service PUBLIC ${CMAKE_SOURCE_DIR})
endfunction()
