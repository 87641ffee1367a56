// Package gpu holds the checks that need a real GPU and its driver
// (libcuda.so.1): buffers in device memory moved between two processes
// over shm (CUDA IPC) and TCP (staged through pinned host memory), every
// byte checked. Without a driver or a device the test skips with a line
// that says why, so the package runs everywhere.
//
// run.sh builds what a machine with a GPU but no Go toolchain needs (the
// rdmamgr binary and this package's test binary, stripped) and prints the
// one command to run there; device.sh is that command: the driver check,
// this test, and the GPU figures of issue 27 beside the vendor's own copies
// (PyTorch, where installed) in the same run.
package gpu
