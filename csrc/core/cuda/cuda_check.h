// Every CUDA runtime and cuBLAS return code goes through these macros; a
// failure becomes a grouped_linear::Error naming the call and the code.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/error.h"

namespace grouped_linear::cuda {

const char* cublas_status_name(cublasStatus_t status);

}  // namespace grouped_linear::cuda

#define GL_CUDA_CHECK(expr)                                                                   \
  do {                                                                                        \
    const cudaError_t gl_status_ = (expr);                                                    \
    GL_CHECK(gl_status_ == cudaSuccess, "CUDA call ", #expr,                                  \
             " failed: ", cudaGetErrorName(gl_status_), " (", cudaGetErrorString(gl_status_), \
             ")");                                                                            \
  } while (0)

#define GL_CUBLAS_CHECK(expr)                                                      \
  do {                                                                             \
    const cublasStatus_t gl_status_ = (expr);                                      \
    GL_CHECK(gl_status_ == CUBLAS_STATUS_SUCCESS, "cuBLAS call ", #expr,           \
             " failed: ", ::grouped_linear::cuda::cublas_status_name(gl_status_)); \
  } while (0)

// After a kernel launch: catches bad configurations at the launch site.
#define GL_CUDA_CHECK_LAUNCH() GL_CUDA_CHECK(cudaGetLastError())
