package cuda

// Extent returns the device allocation b lies in: its slab (PoolSlab
// bytes) for a slot, else its own allocation (Size bytes as asked; the
// driver backs it to its page granularity at least). A backend that
// exports device memory once per allocation (a dma-buf fd for
// ibv_reg_dmabuf_mr) keys its exports by base and registers each block at
// its offset in it.
func (b Block) Extent() (base DevicePtr, size uint64) {
	if b.slab == nil {
		return b.Ptr, b.Size
	}
	return b.slab.base, PoolSlab
}
