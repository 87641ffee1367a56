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
// (PyTorch, where installed) in the same run. The device machine also has
// more cores than the development one: run.sh --oprate carries UCX's
// ucx_perftest and jq with their libraries as well, and oprate.sh runs
// issue 25's op-rate tables there (README "Small operations") in one call.
// run.sh --base REV also builds REV's rdmamgr, and ab.sh there runs the
// two builds alternately, run by run (the machine's speed moves from one
// start to the next by more than most changes): the ratios of the TCP
// pipeline, the small operations at both placements and 8 processes,
// each build's median, and with --profile the CPU profiles of both ends
// of the pipeline, in about three minutes.
package gpu
