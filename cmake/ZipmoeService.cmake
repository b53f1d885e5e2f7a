# zipmoe_add_service_library(<name>): library zipmoe_<name> from services/<name>/*.cc, linking
# zipmoe_common and zipmoe_kernels (torch-free). An empty folder yields an INTERFACE library so the
# build and the test suites stay valid while a service is being written.
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
