//go:build ibverbs

package ibverbs

/*
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/rdmamgr/rdmamgr"
)

type portAttr struct {
	state, linkLayer, activeMTU int
	maxMsg                      uint32
	gidTblLen                   int
	lid                         uint16
}

type devAttr struct {
	ports, maxCQE, maxQPWR, maxQPRdAtom, maxQPInitRdAtom int
	atomicCap                                            int // enum ibv_atomic_cap
}

type gidEntry struct {
	index int
	gid   [16]byte
	typ   int // gidType*, -1 unknown
}

// devContext is an open device.
type devContext struct {
	ctx  *C.struct_ibv_context
	name string
}

// deviceNames lists the devices; ErrNoDevices when there are none.
func deviceNames() ([]string, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		if errors.Is(err, syscall.ENOSYS) || err == nil {
			return nil, ErrNoDevices
		}
		return nil, fmt.Errorf("%w: ibv_get_device_list: %v", ErrNoDevices, err)
	}
	defer C.ibv_free_device_list(list)
	if n == 0 {
		return nil, ErrNoDevices
	}
	names := make([]string, 0, int(n))
	for i := 0; i < int(n); i++ {
		names = append(names, C.GoString(C.ibv_get_device_name(C.rm_dev_at(list, C.int(i)))))
	}
	return names, nil
}

// openDevice opens the device called name.
func openDevice(name string) (*devContext, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil || n == 0 {
		if list != nil {
			C.ibv_free_device_list(list)
		}
		if err != nil && !errors.Is(err, syscall.ENOSYS) {
			return nil, fmt.Errorf("%w: ibv_get_device_list: %v", ErrNoDevices, err)
		}
		return nil, ErrNoDevices
	}
	defer C.ibv_free_device_list(list)
	for i := 0; i < int(n); i++ {
		d := C.rm_dev_at(list, C.int(i))
		if C.GoString(C.ibv_get_device_name(d)) != name {
			continue
		}
		ctx, err := C.ibv_open_device(d)
		if ctx == nil {
			return nil, fmt.Errorf("ibverbs: open %s: %w", name, cerr(err))
		}
		return &devContext{ctx: ctx, name: name}, nil
	}
	return nil, fmt.Errorf("ibverbs: no device %q: %w", name, rdmamgr.ErrNotSupported)
}

func (d *devContext) close() {
	if d.ctx != nil {
		C.ibv_close_device(d.ctx)
		d.ctx = nil
	}
}

func (d *devContext) query() (devAttr, error) {
	var a C.struct_rm_dev
	if rc := C.rm_query_device(d.ctx, &a); rc != 0 {
		return devAttr{}, fmt.Errorf("ibverbs: query %s: %w", d.name, errnoErr(rc))
	}
	return devAttr{
		ports: int(a.phys_port_cnt), maxCQE: int(a.max_cqe), maxQPWR: int(a.max_qp_wr),
		maxQPRdAtom: int(a.max_qp_rd_atom), maxQPInitRdAtom: int(a.max_qp_init_rd_atom),
		atomicCap: int(a.atomic_cap),
	}, nil
}

func (d *devContext) queryPort(port int) (portAttr, error) {
	var a C.struct_rm_port
	if rc := C.rm_query_port(d.ctx, C.int(port), &a); rc != 0 {
		return portAttr{}, fmt.Errorf("ibverbs: query %s port %d: %w", d.name, port, errnoErr(rc))
	}
	return portAttr{
		state: int(a.state), linkLayer: int(a.link_layer), activeMTU: int(a.active_mtu),
		maxMsg: uint32(a.max_msg_sz), gidTblLen: int(a.gid_tbl_len), lid: uint16(a.lid),
	}, nil
}

func (d *devContext) queryGID(port, idx int) (gidEntry, error) {
	var g C.struct_rm_gid
	if rc := C.rm_query_gid(d.ctx, C.int(port), C.int(idx), &g); rc != 0 {
		return gidEntry{}, fmt.Errorf("ibverbs: query %s port %d gid %d: %w", d.name, port, idx, errnoErr(rc))
	}
	e := gidEntry{index: idx, typ: int(g._type)}
	copy(e.gid[:], C.GoBytes(unsafe.Pointer(&g.raw[0]), 16))
	return e, nil
}

// gids returns the port's non-zero GID entries.
func (d *devContext) gids(port int, tblLen int) []gidEntry {
	var out []gidEntry
	for i := 0; i < tblLen; i++ {
		e, err := d.queryGID(port, i)
		if err != nil || e.gid == ([16]byte{}) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// setAsyncNonblock makes the async event fd non-blocking.
func (d *devContext) setAsyncNonblock() error {
	if rc := C.rm_set_nonblock(d.ctx.async_fd); rc != 0 {
		return fmt.Errorf("ibverbs: async fd: %w", errnoErr(rc))
	}
	return nil
}

// waitAsync blocks for the next async event; ok false when woken by wakefd.
func (d *devContext) waitAsync(wakefd int) (ev asyncEvent, ok bool, err error) {
	var e C.struct_rm_async
	rc := C.rm_wait_async(d.ctx, C.int(wakefd), &e)
	switch {
	case rc < 0:
		return ev, false, errnoErr(rc)
	case rc == 0:
		return ev, false, nil
	}
	return asyncEvent{typ: int32(e._type), qpn: uint32(e.qp_num), port: int(e.port)}, true, nil
}

type asyncEvent struct {
	typ  int32
	qpn  uint32
	port int
}
