// C++ exceptions -> Python exceptions, done by every bound function itself.
#pragma once

#include <torch/csrc/Exceptions.h>
#include <torch/extension.h>

#include "core/error.h"

namespace grouped_linear::torch_binding {

namespace py = pybind11;

// Sets the Python exception for the C++ exception in flight, keeping the
// kind of core errors: ValueError, TypeError or RuntimeError. A Python
// exception raised inside the call (a saved-tensor hook, such as the one
// torch.utils.checkpoint stops its recomputation with) reaches torch's C++
// as python_error and leaves as itself, its type and message intact.
inline void set_python_error() {
  try {
    throw;
  } catch (python_error& e) {
    e.restore();  // persisted: set it again; else the Python error is still set
  } catch (const Error& e) {
    PyObject* type = e.kind() == ErrorKind::kValue  ? PyExc_ValueError
                     : e.kind() == ErrorKind::kType ? PyExc_TypeError
                                                    : PyExc_RuntimeError;
    PyErr_SetString(type, e.what());
  } catch (const c10::TypeError& e) {
    PyErr_SetString(PyExc_TypeError, e.what_without_backtrace());
  } catch (const c10::ValueError& e) {
    PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

// Wraps a bound function so that it converts its own C++ exceptions into
// Python ones: the module does not depend on pybind11's translator registry,
// which torch._C may share.
template <typename Ret, typename... Args>
auto guarded(Ret (*fn)(Args...)) {
  return [fn](Args... args) -> Ret {
    try {
      return fn(std::forward<Args>(args)...);
    } catch (const py::error_already_set&) {
      throw;
    } catch (...) {
      set_python_error();
      throw py::error_already_set();
    }
  };
}

}  // namespace grouped_linear::torch_binding
