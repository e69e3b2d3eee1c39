// Stub of CUDA's <cuda_fp16.h> for the host emulator. Kernels include it inside their namespace
// (after cuda_shim.h), so it must declare nothing: the 16-bit float types and functions
// live in cuda_shim.h (shim_half.h), in the global namespace.
#ifndef RNN_EMU_CUDA_SHIM_H
#error "include cuda_shim.h before cuda_fp16.h"
#endif
