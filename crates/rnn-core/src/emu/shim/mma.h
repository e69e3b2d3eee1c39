// Stub of CUDA's <mma.h> for the host emulator. Kernels include it inside their namespace
// (after cuda_shim.h), so it must declare nothing: nvcuda::wmma lives in cuda_shim.h
// (shim_wmma.h), in the global namespace.
#ifndef RNN_EMU_CUDA_SHIM_H
#error "include cuda_shim.h before mma.h"
#endif
