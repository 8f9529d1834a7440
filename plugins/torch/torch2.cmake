# The torch 2 backend (docs/torch.md): _autoinfra_torch2.so, a Python
# extension holding a c10d::Backend of torch 2.x (process_group_2.cpp) over
# the same core as the torch 1.13 module, built against the torch that
# AI_TORCH2_PYTHON imports: the virtual environment of
# scripts/install-torch-venv (`make torch2-venv`, torch from PyPI). Without
# that Python it is skipped with a message.
#
# The flags come from that torch itself, as torch.utils.cpp_extension
# takes them for a CPU extension: its include folders (pybind11 among them,
# the copy torch's own bindings were built with), its libraries, its C++
# ABI, and its pybind11 ABI tag, so that the Backend and ProcessGroup this
# module returns are torch's registered Python types. find_package(Torch)
# is not used: PyPI's torch is a CUDA build whose CMake config looks for a
# CUDA toolkit, and its cache variables would clash with the torch 1.13
# config found in this folder.

set(AI_TORCH2_PYTHON "$ENV{HOME}/.cache/autoinfra/torch-2.13.0-py3.11/bin/python"
    CACHE FILEPATH "A Python whose torch 2.x the torch 2 backend is built against and tested with")
if(NOT EXISTS "${AI_TORCH2_PYTHON}")
  message(STATUS "torch 2 plugin: no ${AI_TORCH2_PYTHON}; the torch 2 backend is not built "
                 "(make torch2-venv)")
  return()
endif()
# The torch's flags, written by that Python as set() lines and included.
set(_ai_t2_flags ${CMAKE_CURRENT_BINARY_DIR}/torch2-flags.cmake)
execute_process(
  COMMAND "${AI_TORCH2_PYTHON}" -c [=[
import os, sys, sysconfig, torch
c, d = torch._C, os.path.dirname(torch.__file__)
defs = ['%s=\\"%s\\"' % (k, getattr(c, "_" + k)) for k in
        ("PYBIND11_COMPILER_TYPE", "PYBIND11_STDLIB", "PYBIND11_BUILD_ABI") if hasattr(c, "_" + k)]
with open(sys.argv[1], "w") as f:
    f.write('set(AI_TORCH2_VERSION "%s")\n' % torch.__version__)
    f.write('set(_ai_t2_inc "%s" "%s")\n' % (os.path.join(d, "include"),
                                             os.path.join(d, "include", "torch", "csrc", "api", "include")))
    f.write('set(_ai_t2_lib "%s")\n' % os.path.join(d, "lib"))
    f.write('set(_ai_t2_pyinc "%s")\n' % sysconfig.get_paths()["include"])
    f.write('set(_ai_t2_abi %d)\n' % int(c._GLIBCXX_USE_CXX11_ABI))
    f.write('set(_ai_t2_defs %s)\n' % " ".join('"%s"' % x for x in defs))
]=] ${_ai_t2_flags}
  ERROR_VARIABLE _ai_t2_err RESULT_VARIABLE _ai_t2_rc)
if(NOT _ai_t2_rc EQUAL 0)
  message(STATUS "torch 2 plugin: ${AI_TORCH2_PYTHON} cannot import torch (${_ai_t2_err}); "
                 "the torch 2 backend is not built")
  return()
endif()
include(${_ai_t2_flags})
if(NOT AI_TORCH2_VERSION MATCHES "^2\\.")
  message(STATUS "torch 2 plugin: ${AI_TORCH2_PYTHON} has torch ${AI_TORCH2_VERSION}, not 2.x; "
                 "the torch 2 backend is not built")
  return()
endif()

ai_torch_setup()
add_library(autoinfra-torch2 MODULE comm_runner.cpp process_group_2.cpp shares_binding.cpp
            comm_error.cpp)
set_target_properties(autoinfra-torch2 PROPERTIES
  OUTPUT_NAME _autoinfra_torch2 PREFIX "" SUFFIX ".so"
  CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF
  CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
target_include_directories(autoinfra-torch2 SYSTEM BEFORE PRIVATE ${_ai_t2_inc} ${_ai_t2_pyinc})
target_include_directories(autoinfra-torch2 PRIVATE ${CMAKE_SOURCE_DIR}/include)
target_compile_definitions(autoinfra-torch2 PRIVATE _GLIBCXX_USE_CXX11_ABI=${_ai_t2_abi}
                           TORCH_EXTENSION_NAME=_autoinfra_torch2)
foreach(d IN LISTS _ai_t2_defs)
  target_compile_definitions(autoinfra-torch2 PRIVATE "${d}")
endforeach()
foreach(l torch_python torch torch_cpu c10)
  target_link_libraries(autoinfra-torch2 PRIVATE ${_ai_t2_lib}/lib${l}.so)
endforeach()
target_link_libraries(autoinfra-torch2 PRIVATE ${AI_TORCH_AI_LIB})
message(STATUS "torch 2 plugin: building _autoinfra_torch2.so (torch ${AI_TORCH2_VERSION} of "
               "${AI_TORCH2_PYTHON})")

# A torch 2 test: ai_torch_test's, run by AI_TORCH2_PYTHON with this
# module; further arguments are more VAR=value for its environment.
function(ai_torch2_test prefix script case kb timeout)
  string(REPLACE " " "_" name "${prefix}_${case}")
  separate_arguments(args UNIX_COMMAND "${case}")
  add_test(NAME ${name} COMMAND ${AI_TORCH2_PYTHON} -W ignore::UserWarning
           ${CMAKE_SOURCE_DIR}/tests/torch/${script} ${args})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${timeout} ENVIRONMENT
    "AUTOINFRA_TORCH_LIB=$<TARGET_FILE:autoinfra-torch2>;AUTOINFRA_KB=${CMAKE_BINARY_DIR}/${kb};${ARGN}")
endfunction()

# check_backend.py's cases as for torch 1.13 (gloo of torch 2 has what
# 1.13's lacks, but the comparisons stay the same).
foreach(t "collectives 2" "collectives 3" "collectives 4" "ddp 2" "ddp 3" "kill 3"
          "deferred 3" "groups 3" "revoke 2" "mismatch 3" "p2p 2" "p2p 3" "asyncsmall 3"
          "features 3" "suite 3")
  ai_torch2_test(torch2 check_backend.py "${t}" test-kb-torch2.sqlite 180)
endforeach()

# check_everyday.py as for torch 1.13.
ai_torch2_test(torch2_everyday check_everyday.py 2 test-kb-torch2.sqlite 180)

# check_elastic.py: the joiner starts only after the kill, and its imports
# of torch 2 and what DDP pulls in took over 40 s on the loaded 2-core
# machine: the run's limit is 150 s instead of 50.
ai_torch2_test(torch2_elastic check_elastic.py 3 test-kb-torch2.sqlite 200
               AUTOINFRA_ELASTIC_LIMIT_S=150)

# check_fsdp.py: the training job under FSDP (fully_shard: reduce_scatter
# and allgather) on 2 ranks, autoinfra's losses against gloo's; mostly two starts of
# torch 2 per backend, minutes on a loaded machine.
ai_torch2_test(torch2_fsdp check_fsdp.py 2 test-kb-torch2.sqlite 420)
