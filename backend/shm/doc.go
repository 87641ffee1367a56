// Package shm is the same-host backend: one-sided Put and Get between
// processes on one host through shared memory, with no socket and no
// owner CPU on the data path. (Design and contract: being written.)
package shm
