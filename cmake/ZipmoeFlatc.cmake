# zipmoe_flatc_headers(OUT_VAR SCHEMA_DIR OUT_DIR): one custom command per schema of SCHEMA_DIR
# (*.fbs) generating OUT_DIR/<stem>_generated.h; OUT_VAR receives the header paths. Used by the main
# build (schemas/CMakeLists.txt) and the fuzz project (tests/fuzz/), so both generate the same code.
# The object API (--gen-object-api: a plain C++ struct `<Table>T` per table, Pack/UnPack) with
# operator== (--gen-compare) is the message types' C++ side (common/ipc/messaging.h); C++17 makes
# optional scalars std::optional; --reflect-types --reflect-names add each table's field types and names (MiniReflectTypeTable, used
# by messaging.cc's alignment check). A schema may `include` another one of the folder (messages.fbs
# includes manifest.fbs), so each header depends on every schema and flatc searches the folder.
function(zipmoe_flatc_headers out_var schema_dir out_dir)
  file(GLOB schemas CONFIGURE_DEPENDS ${schema_dir}/*.fbs)
  set(headers)
  foreach(fbs ${schemas})
    get_filename_component(stem ${fbs} NAME_WE)
    set(out ${out_dir}/${stem}_generated.h)
    add_custom_command(OUTPUT ${out}
      COMMAND flatbuffers::flatc --cpp --scoped-enums --gen-object-api --gen-compare --reflect-types --reflect-names --cpp-std c++17
              -I ${schema_dir} -o ${out_dir} ${fbs}
      DEPENDS ${schemas} flatbuffers::flatc
      COMMENT "flatc ${stem}.fbs")
    list(APPEND headers ${out})
  endforeach()
  set(${out_var} ${headers} PARENT_SCOPE)
endfunction()
