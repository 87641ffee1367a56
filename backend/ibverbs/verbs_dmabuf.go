//go:build ibverbs

package ibverbs

/*
#include <infiniband/verbs.h>
#include "shim.h"

// ibv_reg_dmabuf_mr came with rdma-core 34 (libibverbs 1.12); Debian
// bookworm ships 44. The MR covers [iova, iova+len) and maps bytes
// [off, off+len) of the dma-buf fd.
static struct ibv_mr *rm_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t off, uint64_t len,
				       uint64_t iova, int fd, int access)
{
	return ibv_reg_dmabuf_mr(pd, off, (size_t)len, iova, fd, access);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
)

// regDmabufMR registers length bytes at offset off of dma-buf fd (device
// memory a GPU driver exported) as a memory region addressed by peers at
// iova (the device address), with access.
func (r *verbsRes) regDmabufMR(fd int, off, length, iova uint64, access int) (*memReg, error) {
	mr, err := C.rm_reg_dmabuf_mr(r.pd, C.uint64_t(off), C.uint64_t(length), C.uint64_t(iova), C.int(fd), C.int(access))
	if mr == nil {
		return nil, fmt.Errorf("ibv_reg_dmabuf_mr of %d bytes: %w", length, cerr(err))
	}
	return &memReg{mr: mr, lkey: uint32(C.rm_mr_lkey(mr)), rkey: uint32(C.rm_mr_rkey(mr)), addr: iova, length: length}, nil
}

// nicCannotDmabuf reports whether a failed ibv_reg_dmabuf_mr says the
// device (or its kernel driver, or the provider library) does not
// register dma-buf at all, rather than that this one call failed.
// EOPNOTSUPP is what the kernel answers for a device without
// reg_user_mr_dmabuf (rdma_rxe among them) and what libibverbs answers
// for a provider without it.
func nicCannotDmabuf(err error) bool {
	return errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.EPROTONOSUPPORT) || errors.Is(err, syscall.ENOSYS)
}
