// Host cost of one kernel launch against the bytes of its parameters.
//
//   launch_probe [--launches N]
//
// A grouped GEMM launch passes CUTLASS's Params, the argument-array pointers
// and up to 1024 host group sizes (4 KiB) by value. This times
// cudaLaunchKernelEx of an empty kernel with 16 B to 16 KiB of parameters,
// with and without a cluster attribute (the grouped kernels' launch has
// one): host µs per launch = wall time to issue N launches / N (best of 5
// batches); wall µs adds the wait for the device at the end of the batch.
// Build: nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a
// bench/cpp/launch_probe.cu -o launch_probe (cmake: target gl_launch_probe).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "launch_probe: %s: %s\n", what, cudaGetErrorString(status));
  std::exit(1);
}

template <int Bytes>
struct Payload {
  unsigned char bytes[Bytes];
};

// Reads one byte so the parameters cannot be optimised away; writes nothing.
template <int Bytes>
__global__ void empty_kernel(Payload<Bytes> payload, unsigned char* sink) {
  if (sink != nullptr && threadIdx.x == 0 && blockIdx.x == 0) *sink = payload.bytes[Bytes - 1];
}

template <int Bytes>
void probe(cudaStream_t stream, bool cluster, int launches) {
  Payload<Bytes> payload{};
  unsigned char* sink = nullptr;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(132);
  config.blockDim = dim3(384);
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  if (cluster) {
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = 1;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  auto launch = [&] {
    check(cudaLaunchKernelEx(&config, empty_kernel<Bytes>, payload, sink), "cudaLaunchKernelEx");
  };
  for (int i = 0; i < 100; ++i) launch();
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  double best_host = 1e30, best_wall = 0;
  for (int batch = 0; batch < 5; ++batch) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < launches; ++i) launch();
    const auto issued = std::chrono::steady_clock::now();
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const auto done = std::chrono::steady_clock::now();
    const double host = std::chrono::duration<double, std::micro>(issued - start).count();
    if (host < best_host) {
      best_host = host;
      best_wall = std::chrono::duration<double, std::micro>(done - start).count();
    }
  }
  std::printf("%8d %8d %10.2f %10.2f\n", Bytes, cluster ? 1 : 0, best_host / launches,
              best_wall / launches);
}

}  // namespace

int main(int argc, char** argv) {
  int launches = 500;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--launches") == 0 && i + 1 < argc) {
      launches = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: launch_probe [--launches N]\n");
      return 2;
    }
  }
  if (launches < 1) {
    std::fprintf(stderr, "launch_probe: --launches: expected a positive count\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "launch_probe: no CUDA device\n");
    return 1;
  }
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  std::printf("# launch_probe: %d launches a batch, best of 5 batches\n", launches);
  std::printf("%8s %8s %10s %10s\n", "bytes", "cluster", "host_us", "wall_us");
  for (const bool cluster : {false, true}) {
    probe<16>(stream, cluster, launches);
    probe<256>(stream, cluster, launches);
    probe<1024>(stream, cluster, launches);
    probe<2048>(stream, cluster, launches);
    probe<4096>(stream, cluster, launches);
    probe<5120>(stream, cluster, launches);
    probe<8192>(stream, cluster, launches);
    probe<16384>(stream, cluster, launches);
  }
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  return 0;
}
