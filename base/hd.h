/* hd.h — GATE_HD marks a function compiled for both the host and the device: __host__
 * __device__ under nvcc, nothing for the C compiler. Used by the definitions that the reference
 * twin and the CUDA kernels must share (routing, faults, deterministic exp): one definition,
 * two compilers, never a copy. */
#ifndef GATE_HD_H
#define GATE_HD_H

#ifdef __CUDACC__
#define GATE_HD __host__ __device__
#else
#define GATE_HD
#endif

#endif
