/*!
 * \file cudnn_conv.cc
 * \brief 1-D convolutions of a CUDA build through cuDNN, called from compiled Relax code.
 *
 *   kokoro_ext.cudnn.conv1d(options, x, w, bias, out)
 *     options  [stride, padding, dilation, math]: math 0 exact float32 (FMA kernels only,
 *              as PyTorch with TF32 off), 1 TF32 tensor cores, 2 float16 tensor cores on
 *              the float32 tensors (cuDNN converts them; the sums stay float32)
 *     x        float32 [B, C_in, T_in] on a CUDA device
 *     w        float32 [C_out, C_in, K]
 *     bias     float32 [C_out]
 *     out      float32 [B, C_out, T_out]
 *
 * The calling convention of the CPU kernel kokoro_ext.conv1d (cpp/src/dense.cc), with the
 * math type added; kokoro_ext.build.passes.dispatch sends a CUDA build's convolutions here.
 *
 * cuDNN is opened with dlopen at the first call ("libcudnn.so.9": the run side loads the
 * nvidia-cudnn-cu13 wheel's copy first, kokoro_ext.run.cuda), so this library loads, and
 * its argument checks run, on a machine without cuDNN or a GPU.  It runs on TVM's
 * current stream of the device (TVMFFIEnvGetStream) and takes its workspace from TVM's
 * workspace pool (TVMBackendAllocWorkspace).  The algorithm is cuDNN's heuristic choice
 * for the shapes (cudnnGetConvolutionForwardAlgorithm_v7), kept per shape: lengths vary
 * from call to call, so a benchmarked choice (cudnnFind...) would time every new one.
 */
#include <cudnn.h>
#include <dlfcn.h>
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

extern "C" {
// TVM's runtime (libtvm_runtime.so, loaded before any stage library)
void* TVMBackendAllocWorkspace(int device_type, int device_id, uint64_t nbytes,
                               int dtype_code_hint, int dtype_bits_hint);
int TVMBackendFreeWorkspace(int device_type, int device_id, void* ptr);
}

namespace kokoro_ext {
namespace {

constexpr const char* kName = "kokoro_ext.cudnn.conv1d";
constexpr const char* kLibrary = "libcudnn.so.9";

/*! \brief The cuDNN functions this file calls, resolved from libcudnn.so.9 once. */
struct Cudnn {
#define KOKORO_CUDNN_FUNCTIONS(X)                                                        \
  X(cudnnGetErrorString) X(cudnnCreate) X(cudnnSetStream) X(cudnnCreateTensorDescriptor) \
  X(cudnnSetTensor4dDescriptor) X(cudnnDestroyTensorDescriptor)                          \
  X(cudnnCreateFilterDescriptor) X(cudnnSetFilter4dDescriptor)                           \
  X(cudnnDestroyFilterDescriptor) X(cudnnCreateConvolutionDescriptor)                    \
  X(cudnnSetConvolution2dDescriptor) X(cudnnSetConvolutionMathType)                      \
  X(cudnnDestroyConvolutionDescriptor) X(cudnnGetConvolutionForwardAlgorithm_v7)         \
  X(cudnnGetConvolutionForwardWorkspaceSize) X(cudnnConvolutionForward) X(cudnnAddTensor)
#define KOKORO_CUDNN_MEMBER(f) decltype(&::f) f = nullptr;
  KOKORO_CUDNN_FUNCTIONS(KOKORO_CUDNN_MEMBER)
#undef KOKORO_CUDNN_MEMBER

  static const Cudnn& Get() {
    static const Cudnn loaded = Load();
    return loaded;
  }

 private:
  static Cudnn Load() {
    void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      TVM_FFI_THROW(RuntimeError)
          << kName << ": cuDNN (" << kLibrary << ") does not load (" << dlerror()
          << "); pip install 'kokoro-tvm-ext[cuda]' (the nvidia-cudnn-cu13 wheel), or build "
             "without --gpu-conv cudnn";
    }
    Cudnn c;
#define KOKORO_CUDNN_RESOLVE(f)                                                          \
  c.f = reinterpret_cast<decltype(c.f)>(dlsym(handle, #f));                              \
  if (c.f == nullptr) {                                                                  \
    TVM_FFI_THROW(RuntimeError) << kName << ": " << kLibrary << " has no " #f            \
                                << ": it is not cuDNN 9";                                \
  }
    KOKORO_CUDNN_FUNCTIONS(KOKORO_CUDNN_RESOLVE)
#undef KOKORO_CUDNN_RESOLVE
    return c;
  }
};

void Check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) {
    TVM_FFI_THROW(RuntimeError) << kName << ": " << what << " failed: "
                                << Cudnn::Get().cudnnGetErrorString(status);
  }
}

void CheckTensor(const char* name, const tvm::ffi::TensorView& t, int ndim) {
  if (t.device().device_type != kDLCUDA) {
    TVM_FFI_THROW(ValueError) << kName << ": " << name << " must be on a CUDA device";
  }
  const DLDataType dt = t.dtype();
  if (dt.code != kDLFloat || dt.bits != 32 || dt.lanes != 1) {
    TVM_FFI_THROW(ValueError) << kName << ": " << name << " must be float32";
  }
  if (t.ndim() != ndim || !t.IsContiguous()) {
    TVM_FFI_THROW(ValueError) << kName << ": " << name << " must be a contiguous "
                              << ndim << "-D tensor";
  }
}

/*! \brief The descriptors and algorithm of one convolution's shapes, made once. */
struct Plan {
  cudnnTensorDescriptor_t x, y, bias;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  cudnnConvolutionFwdAlgo_t algo;
  size_t workspace;
};

using Key = std::array<int64_t, 10>;
//! plans kept: the convolutions of a few hundred lengths
constexpr size_t kMaxPlans = 1 << 14;

class Convolutions {
 public:
  static Convolutions& Get() {
    static Convolutions instance;
    return instance;
  }

  void Run(tvm::ffi::Shape options, tvm::ffi::TensorView x, tvm::ffi::TensorView w,
           tvm::ffi::TensorView bias, tvm::ffi::TensorView out) {
    if (options.size() != 4) {
      TVM_FFI_THROW(ValueError) << kName << ": options must be [stride, padding, dilation, "
                                   "math], got " << options.size() << " values";
    }
    CheckTensor("x", x, 3);
    CheckTensor("w", w, 3);
    CheckTensor("bias", bias, 1);
    CheckTensor("out", out, 3);
    const int64_t stride = options[0], pad = options[1], dilation = options[2];
    const int64_t math = options[3];
    const int64_t B = x.shape()[0], C = x.shape()[1], T = x.shape()[2];
    const int64_t O = w.shape()[0], K = w.shape()[2];
    const int64_t T_out = (T + 2 * pad - dilation * (K - 1) - 1) / stride + 1;
    if (stride < 1 || pad < 0 || dilation < 1 || math < 0 || math > 2) {
      TVM_FFI_THROW(ValueError) << kName << ": bad options [" << stride << ", " << pad << ", "
                                << dilation << ", " << math << "]";
    }
    if (w.shape()[1] != C || bias.shape()[0] != O || out.shape()[0] != B ||
        out.shape()[1] != O || out.shape()[2] != T_out || T_out < 1) {
      TVM_FFI_THROW(ValueError) << kName << ": shapes do not match: x [" << B << ", " << C
                                << ", " << T << "], w [" << O << ", " << w.shape()[1] << ", "
                                << K << "], out [" << out.shape()[0] << ", " << out.shape()[1]
                                << ", " << out.shape()[2] << "], expected T_out " << T_out;
    }
    const int device = x.device().device_id;
    std::lock_guard<std::mutex> lock(mutex_);
    const Cudnn& dnn = Cudnn::Get();
    cudnnHandle_t handle = Handle(device);
    Check(dnn.cudnnSetStream(
              handle, static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, device))),
          "cudnnSetStream");
    const Plan& plan = PlanFor({device, B, C, T, O, K, stride, pad, dilation, math}, handle);
    void* workspace = nullptr;
    if (plan.workspace > 0) {
      workspace = TVMBackendAllocWorkspace(kDLCUDA, device, plan.workspace, kDLFloat, 32);
      if (workspace == nullptr) {
        TVM_FFI_THROW(RuntimeError) << kName << ": no " << plan.workspace
                                    << " bytes of workspace on the GPU";
      }
    }
    const float one = 1.f, zero = 0.f;
    cudnnStatus_t status = dnn.cudnnConvolutionForward(
        handle, &one, plan.x, x.data_ptr(), plan.w, w.data_ptr(), plan.conv, plan.algo,
        workspace, plan.workspace, &zero, plan.y, out.data_ptr());
    if (workspace != nullptr) TVMBackendFreeWorkspace(kDLCUDA, device, workspace);
    Check(status, "cudnnConvolutionForward");
    Check(dnn.cudnnAddTensor(handle, &one, plan.bias, bias.data_ptr(), &one, plan.y,
                             out.data_ptr()),
          "cudnnAddTensor (the bias)");
  }

 private:
  cudnnHandle_t Handle(int device) {
    auto found = handles_.find(device);
    if (found != handles_.end()) return found->second;
    cudnnHandle_t handle;
    Check(Cudnn::Get().cudnnCreate(&handle), "cudnnCreate");
    return handles_[device] = handle;
  }

  const Plan& PlanFor(const Key& key, cudnnHandle_t handle) {
    auto found = plans_.find(key);
    if (found != plans_.end()) return found->second;
    const Cudnn& dnn = Cudnn::Get();
    if (plans_.size() >= kMaxPlans) {  // a long-running server sees every length
      for (auto& [_, p] : plans_) {
        dnn.cudnnDestroyTensorDescriptor(p.x);
        dnn.cudnnDestroyTensorDescriptor(p.y);
        dnn.cudnnDestroyTensorDescriptor(p.bias);
        dnn.cudnnDestroyFilterDescriptor(p.w);
        dnn.cudnnDestroyConvolutionDescriptor(p.conv);
      }
      plans_.clear();
    }
    const auto [device, B, C, T, O, K, stride, pad, dilation, math] = key;
    (void)device;
    const int64_t T_out = (T + 2 * pad - dilation * (K - 1) - 1) / stride + 1;
    auto i = [](int64_t v) { return static_cast<int>(v); };
    Plan p;
    Check(dnn.cudnnCreateTensorDescriptor(&p.x), "cudnnCreateTensorDescriptor");
    Check(dnn.cudnnCreateTensorDescriptor(&p.y), "cudnnCreateTensorDescriptor");
    Check(dnn.cudnnCreateTensorDescriptor(&p.bias), "cudnnCreateTensorDescriptor");
    Check(dnn.cudnnCreateFilterDescriptor(&p.w), "cudnnCreateFilterDescriptor");
    Check(dnn.cudnnCreateConvolutionDescriptor(&p.conv), "cudnnCreateConvolutionDescriptor");
    // a 1-D convolution as a 2-D one of height 1
    Check(dnn.cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(B), i(C),
                                         1, i(T)),
          "cudnnSetTensor4dDescriptor (x)");
    Check(dnn.cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(B), i(O),
                                         1, i(T_out)),
          "cudnnSetTensor4dDescriptor (out)");
    Check(dnn.cudnnSetTensor4dDescriptor(p.bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, i(O),
                                         1, 1),
          "cudnnSetTensor4dDescriptor (bias)");
    Check(dnn.cudnnSetFilter4dDescriptor(p.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(O), i(C),
                                         1, i(K)),
          "cudnnSetFilter4dDescriptor");
    Check(dnn.cudnnSetConvolution2dDescriptor(p.conv, 0, i(pad), 1, i(stride), 1, i(dilation),
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          "cudnnSetConvolution2dDescriptor");
    // FMA: float32 kernels only (PyTorch's choice with TF32 off); DEFAULT lets cuDNN use
    // TF32 tensor cores on float32 data; ALLOW_CONVERSION lets it convert to float16
    const cudnnMathType_t types[] = {CUDNN_FMA_MATH, CUDNN_DEFAULT_MATH,
                                     CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION};
    Check(dnn.cudnnSetConvolutionMathType(p.conv, types[math]), "cudnnSetConvolutionMathType");
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    Check(dnn.cudnnGetConvolutionForwardAlgorithm_v7(handle, p.x, p.w, p.conv, p.y,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                     &returned, perf),
          "cudnnGetConvolutionForwardAlgorithm_v7");
    int chosen = -1;
    for (int k = 0; k < returned && chosen < 0; ++k) {
      // the heuristic's ranking; an algorithm of another math type would break the
      // float32 contract of math 0
      if (perf[k].status == CUDNN_STATUS_SUCCESS &&
          (math != 0 || perf[k].mathType == CUDNN_FMA_MATH)) {
        chosen = k;
      }
    }
    if (chosen < 0) {
      TVM_FFI_THROW(RuntimeError) << kName << ": cuDNN has no algorithm for x [" << B << ", "
                                  << C << ", " << T << "], w [" << O << ", " << C << ", " << K
                                  << "], stride " << stride << ", dilation " << dilation;
    }
    p.algo = perf[chosen].algo;
    Check(dnn.cudnnGetConvolutionForwardWorkspaceSize(handle, p.x, p.w, p.conv, p.y, p.algo,
                                                      &p.workspace),
          "cudnnGetConvolutionForwardWorkspaceSize");
    return plans_.emplace(key, p).first->second;
  }

  std::mutex mutex_;
  std::map<int, cudnnHandle_t> handles_;
  std::map<Key, Plan> plans_;
};

void Conv1d(tvm::ffi::Shape options, tvm::ffi::TensorView x, tvm::ffi::TensorView w,
            tvm::ffi::TensorView bias, tvm::ffi::TensorView out) {
  Convolutions::Get().Run(options, x, w, bias, out);
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef().def(kName, Conv1d);
}

}  // namespace kokoro_ext
