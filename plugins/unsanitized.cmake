# Plugins loaded into programs that are not built with sanitizers (mpirun's
# ranks, /usr/bin/python3): an ASan library loaded into such a program
# aborts ("ASan runtime does not come first"). Such a plugin folder calls
#   ai_plugin_unsanitized(<var>)
# which removes the inherited -fsanitize options from the folder and sets
# <var> to the library the plugin links: libautoinfra.a itself, or in a
# sanitizer build (AI_SANITIZE=ON, where libautoinfra.a is sanitized) one
# unsanitized, PIC copy compiled from the same sources with the same
# include directories, definitions and dependencies, shared by every such
# plugin (autoinfra_unsanitized).

function(ai_plugin_strip_sanitize prop)
  get_directory_property(_opts ${prop})
  set(_keep "")
  foreach(o IN LISTS _opts)
    if(NOT o MATCHES "^-f(no-)?sanitize")
      list(APPEND _keep "${o}")
    endif()
  endforeach()
  set_directory_properties(PROPERTIES ${prop} "${_keep}")
endfunction()

macro(ai_plugin_unsanitized var)
  ai_plugin_strip_sanitize(COMPILE_OPTIONS)
  ai_plugin_strip_sanitize(LINK_OPTIONS)
  if(NOT AI_SANITIZE)
    set(${var} autoinfra)
  else()
    if(NOT TARGET autoinfra_unsanitized)
      get_target_property(_ai_sources autoinfra SOURCES)
      get_target_property(_ai_src_dir autoinfra SOURCE_DIR)
      set(_abs "")
      foreach(s IN LISTS _ai_sources)
        if(IS_ABSOLUTE "${s}")
          list(APPEND _abs "${s}")
        else()
          list(APPEND _abs "${_ai_src_dir}/${s}")
        endif()
      endforeach()
      add_library(autoinfra_unsanitized STATIC ${_abs})
      set_target_properties(autoinfra_unsanitized PROPERTIES POSITION_INDEPENDENT_CODE ON)
      target_include_directories(autoinfra_unsanitized PRIVATE
        $<TARGET_PROPERTY:autoinfra,INCLUDE_DIRECTORIES>)
      target_compile_definitions(autoinfra_unsanitized PRIVATE
        $<TARGET_PROPERTY:autoinfra,COMPILE_DEFINITIONS>)
      get_target_property(_ai_deps autoinfra LINK_LIBRARIES)
      if(_ai_deps)
        target_link_libraries(autoinfra_unsanitized PUBLIC ${_ai_deps})
      endif()
      target_include_directories(autoinfra_unsanitized INTERFACE ${CMAKE_SOURCE_DIR}/include)
    endif()
    set(${var} autoinfra_unsanitized)
  endif()
endmacro()
