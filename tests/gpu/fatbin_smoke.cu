// A CUDA program compiled inside a pip-toolkit image (nvcc from PyPI wheels) for several archs,
// then run on a real GPU: proves that the image's compiler produces code a GPU executes correctly.
// Prints the device, the SASS it ran, and "ok" when saxpy over 1M floats matches the host.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

__global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

#define CHECK(call) do { cudaError_t e = (call); if (e != cudaSuccess) { \
  std::printf("error: %s: %s\n", #call, cudaGetErrorString(e)); return 2; } } while (0)

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, saxpy));
  std::printf("kernel: binaryVersion %d, ptxVersion %d\n", attr.binaryVersion, attr.ptxVersion);
  const int n = 1 << 20;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) { x[i] = float(i % 1000) * 0.5f; y[i] = float(i % 7); }
  float *dx, *dy;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  saxpy<<<(n + 255) / 256, 256>>>(n, 3.0f, dx, dy);
  CHECK(cudaGetLastError());
  std::vector<float> out(n);
  CHECK(cudaMemcpy(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += out[i] != 3.0f * x[i] + y[i];
  std::printf("%s: %d of %d elements differ\n", bad ? "FAIL" : "ok", bad, n);
  return bad ? 1 : 0;
}
