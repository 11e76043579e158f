# The one Python of this tree: the venv deploy/install-deps.sh makes from
# deploy/python-requirements.txt (/opt/trainyard/venv, or $TRAINYARD_VENV when it ran).
# LibTorch comes from its torch wheel (cmake/trainyard_torch.cmake); the Python client's
# stubs and tests, the bench peers and the browser test run on it. Another interpreter
# with the same packages (a GPU machine's own Python, say) is chosen with
# -DTRAINYARD_PYTHON=/path/to/python3.
if(NOT TRAINYARD_PYTHON)
  if(DEFINED ENV{TRAINYARD_VENV} AND EXISTS "$ENV{TRAINYARD_VENV}/bin/python3")
    set(_ty_default_python "$ENV{TRAINYARD_VENV}/bin/python3")
  elseif(EXISTS /opt/trainyard/venv/bin/python3)
    set(_ty_default_python /opt/trainyard/venv/bin/python3)
  else()
    find_program(_ty_default_python NAMES python3)
  endif()
  if(NOT _ty_default_python)
    message(FATAL_ERROR "No Python found: run `bash deploy/install-deps.sh` (it makes /opt/trainyard/venv), "
                        "or pass -DTRAINYARD_PYTHON=/path/to/python3 with torch installed")
  endif()
  set(TRAINYARD_PYTHON "${_ty_default_python}" CACHE FILEPATH
      "The Python whose packages (torch, grpcio, protobuf, playwright) this build uses" FORCE)
endif()
message(STATUS "Python: ${TRAINYARD_PYTHON}")

# True when TRAINYARD_PYTHON imports every module named; for optional test parts.
function(trainyard_python_has out)
  string(REPLACE ";" ", " _mods "${ARGN}")
  execute_process(COMMAND ${TRAINYARD_PYTHON} -c "import ${_mods}"
                  RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
  if(_rc EQUAL 0)
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()
