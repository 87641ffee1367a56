//go:build ibverbs

package ibverbs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/rdmamgr/rdmamgr"
)

// Opening the device: port and GID selection, the protection domain and
// completion queue (verbs_cq.go), and the list of devices for status.

// Devices lists the RDMA device ports of the machine. With none it returns
// an empty list and ErrNoDevices (which wraps rdmamgr.ErrNotSupported).
func Devices() ([]DeviceInfo, error) {
	names, err := deviceNames()
	if err != nil {
		return []DeviceInfo{}, err
	}
	out := []DeviceInfo{}
	var errs []error
	for _, name := range names {
		d, err := openDevice(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		da, err := d.query()
		if err != nil {
			d.close()
			errs = append(errs, err)
			continue
		}
		for port := 1; port <= da.ports; port++ {
			pa, err := d.queryPort(port)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			info := DeviceInfo{Name: name, Port: port, State: portStateStr(pa.state), ActiveMTU: mtuBytes(pa.activeMTU), LID: pa.lid}
			if pa.linkLayer == linkLayerEthernet {
				info.LinkLayer = "Ethernet"
			} else {
				info.LinkLayer = "InfiniBand"
			}
			for _, g := range d.gids(port, pa.gidTblLen) {
				info.GIDs = append(info.GIDs, fmt.Sprintf("%d %s %s", g.index, gidString(g.gid), gidTypeStr(g.typ)))
			}
			out = append(out, info)
		}
		d.close()
	}
	if len(out) == 0 && len(errs) > 0 {
		return out, errors.Join(errs...)
	}
	return out, nil
}

// Start opens the device, allocates the protection domain and the
// completion queue, starts the completion poller, the async-event listener
// and the watchdog, and registers reg's regions (existing and future) with
// the device. Call it before regions are created: a region created while
// Start runs may be left without RDMA keys.
func (b *Backend) Start(ctx context.Context) error {
	b.life.Lock()
	defer b.life.Unlock()
	if b.closed.Load() {
		return rdmamgr.ErrClosed
	}
	if b.started {
		return errors.New("ibverbs: already started")
	}
	if err := b.open(); err != nil {
		return err
	}
	b.started = true
	b.coarse.Store(time.Now().UnixNano())
	b.wg.Add(3)
	go b.poller()
	go b.asyncLoop()
	go b.watchdog()
	b.log.Info("device open", "addr", b.Addr(), "mtu", mtuBytes(b.mtu), "max_msg", b.maxMsg,
		"cq", b.res.cqCapacity(), "max_in_flight", b.inflight)

	b.reg.AddHooks(b)
	var errs []error
	for _, r := range b.reg.Regions() {
		if err := b.registerLocked(r); err != nil {
			errs = append(errs, fmt.Errorf("region %d: %w", r.ID(), err))
		}
	}
	if len(errs) > 0 {
		b.log.Warn("existing regions not registered with the device", "err", errors.Join(errs...))
	}
	return nil
}

// open picks the device, port and GID and allocates the verbs resources.
func (b *Backend) open() error {
	names, err := deviceNames()
	if err != nil {
		return err
	}
	if b.cfg.Device != "" {
		if !slices.Contains(names, b.cfg.Device) {
			return fmt.Errorf("ibverbs: no device %q (have %v): %w", b.cfg.Device, names, rdmamgr.ErrNotSupported)
		}
		names = []string{b.cfg.Device}
	}
	var errs []error
	for _, name := range names {
		err := b.openDevice(name)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("ibverbs: no usable device port: %w: %w", errors.Join(errs...), rdmamgr.ErrNotSupported)
}

// openDevice opens name, picks its port and GID, allocates the verbs
// resources and sets the backend's limits from the device's.
func (b *Backend) openDevice(name string) (err error) {
	d, err := openDevice(name)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	da, err := d.query()
	if err != nil {
		return err
	}
	port, pa, err := pickPort(d, da, b.cfg.Port)
	if err != nil {
		return err
	}
	gidx, gid, err := pickGID(d, port, pa, b.cfg.GIDIndex)
	if err != nil {
		return err
	}
	if err := d.setAsyncNonblock(); err != nil {
		return err
	}
	cqSize := min(b.cfg.CQSize, da.maxCQE)
	res, err := d.allocRes(cqSize)
	if err != nil {
		return err
	}
	wake, err := newEventFD()
	if err != nil {
		res.free()
		return err
	}
	b.dev, b.res, b.wake, b.port = d, res, wake, port
	b.ethernet = pa.linkLayer == linkLayerEthernet
	b.mtu, b.lid, b.gidIndex, b.gid = pa.activeMTU, pa.lid, gidx, gid
	b.setLimits(da, pa)
	b.atomics = da.atomicCap != atomicNone && !b.cfg.DisableAtomics
	b.cqBudget = newWsem(res.cqCapacity())
	addr := fmt.Sprintf("%s:%d %s", name, port, gidString(gid))
	b.addr.Store(&addr)
	return nil
}

// pickPort returns port want of d, or with want 0 its first active port.
func pickPort(d *devContext, da devAttr, want int) (int, portAttr, error) {
	if want == 0 {
		for p := 1; p <= da.ports; p++ {
			a, err := d.queryPort(p)
			if err == nil && a.state == portActive {
				return p, a, nil
			}
		}
		return 0, portAttr{}, fmt.Errorf("ibverbs: %s has no active port", d.name)
	}
	if want > da.ports {
		return 0, portAttr{}, fmt.Errorf("ibverbs: %s has %d ports, not %d", d.name, da.ports, want)
	}
	pa, err := d.queryPort(want)
	if err != nil {
		return 0, portAttr{}, err
	}
	if pa.state != portActive {
		return 0, portAttr{}, fmt.Errorf("ibverbs: %s port %d is %s", d.name, want, portStateStr(pa.state))
	}
	return want, pa, nil
}

// setLimits sets the message size, RDMA READ depths and per-queue-pair
// work requests from the device's and the port's limits and the config.
func (b *Backend) setLimits(da devAttr, pa portAttr) {
	b.maxMsg = uint64(pa.maxMsg)
	if b.maxMsg == 0 || b.maxMsg > 1<<30 {
		b.maxMsg = 1 << 30
	}
	if b.cfg.MaxMessage > 0 && uint64(b.cfg.MaxMessage) < b.maxMsg {
		b.maxMsg = uint64(b.cfg.MaxMessage)
	}
	b.rdAtom = clamp(da.maxQPRdAtom, 1, 16)
	b.initRd = clamp(da.maxQPInitRdAtom, 1, 16)
	b.inflight = b.cfg.MaxInFlight
	if da.maxQPWR > 1 && b.inflight > da.maxQPWR-1 {
		b.inflight = da.maxQPWR - 1 // one more is kept for the keep-alive probe
	}
}

func clamp(v, lo, hi int) int { return max(lo, min(v, hi)) }

// pickGID returns the GID at want, or with want -1 the first RoCE v2 GID
// holding an IPv4-mapped address, else index 0.
func pickGID(d *devContext, port int, pa portAttr, want int) (int, [16]byte, error) {
	if want >= 0 {
		if want >= pa.gidTblLen {
			return 0, [16]byte{}, fmt.Errorf("ibverbs: %s port %d has %d GIDs, not index %d", d.name, port, pa.gidTblLen, want)
		}
		e, err := d.queryGID(port, want)
		if err != nil {
			return 0, [16]byte{}, err
		}
		if e.gid == ([16]byte{}) && pa.linkLayer == linkLayerEthernet {
			return 0, [16]byte{}, fmt.Errorf("ibverbs: %s port %d GID index %d is empty", d.name, port, want)
		}
		return want, e.gid, nil
	}
	gids := d.gids(port, pa.gidTblLen)
	for _, e := range gids {
		if e.typ == gidTypeRoCEv2 && net.IP(e.gid[:]).To4() != nil {
			return e.index, e.gid, nil
		}
	}
	e, err := d.queryGID(port, 0)
	if err != nil {
		return 0, [16]byte{}, err
	}
	if e.gid == ([16]byte{}) && pa.linkLayer == linkLayerEthernet {
		return 0, [16]byte{}, fmt.Errorf("ibverbs: %s port %d has no GID", d.name, port)
	}
	return 0, e.gid, nil
}
