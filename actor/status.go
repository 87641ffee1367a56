package actor

import (
	"fmt"
	"runtime"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/memreg"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// maxStatusBuffers bounds the buffers a status reply lists (the reply
// stays far below the message limit; buffers_total has the count).
const maxStatusBuffers = 1024

// status builds the status reply.
func (m *Manager) status() *rdmapb.StatusResponse {
	st := m.reg.Stats()
	resp := &rdmapb.StatusResponse{
		ManagerId:          m.id,
		Address:            m.sys.Address(),
		Backend:            m.kinds(),
		DataAddr:           m.dataAddr(),
		RegisteredBytes:    st.Bytes,
		Refusals:           m.book.Snapshot(),
		Goroutines:         uint64(runtime.NumGoroutine()),
		MaxRegisteredBytes: m.cfg.Limits.MaxBytes,
		MaxRemoteBytes:     m.cfg.MaxRemoteBytes,
	}
	regions := m.reg.Regions()
	resp.BuffersTotal = uint64(len(regions))
	if len(regions) > maxStatusBuffers {
		regions = regions[:maxStatusBuffers]
	}
	for _, r := range regions {
		resp.Buffers = append(resp.Buffers, &rdmapb.BufferStatus{
			Region: r.ID(), Length: uint64(r.Len()), Access: uint32(r.Access()), UserMemory: r.Kind() == memreg.KindUser,
		})
	}
	m.mu.Lock()
	resp.RemoteBytes = m.remoteTotal
	entries := make([]*routeEntry, 0, len(m.routes))
	refs := make([]int, 0, len(m.routes))
	for _, e := range m.routes {
		entries = append(entries, e)
		refs = append(refs, e.refs)
	}
	m.mu.Unlock()
	for i, e := range entries {
		resp.Routes = append(resp.Routes, routeStatus(e, refs[i]))
	}
	m.statusOps(resp)
	// The totals are read after the per-peer counters of the inbound
	// routes (statusOps): both only grow, so no peer's count exceeds the
	// total in one reply, however fast the peers go.
	sv := m.Served()
	resp.ServedOps, resp.ServedBytesIn, resp.ServedBytesOut = sv.Ops, sv.BytesIn, sv.BytesOut
	resp.RejectedOps, resp.AuthFailures = sv.Rejected, sv.AuthFail+m.authFailures.Load()
	return resp
}

// routeStatus describes the outbound route e, which has refs references.
func routeStatus(e *routeEntry, refs int) *rdmapb.RouteStatus {
	rs := &rdmapb.RouteStatus{PeerAddr: e.key, Refs: uint32(refs)}
	select {
	case <-e.ready:
	default:
		rs.State = "connecting"
		return rs
	}
	switch {
	case e.err != nil:
		rs.State = "failed: " + e.err.Error()
	case routeDead(e.route):
		rs.State = "down: " + fmt.Sprint(e.route.Err())
	default:
		rs.State = "up"
	}
	if e.route != nil {
		s := e.route.Stats()
		rs.Backend, rs.Why = string(e.kind), e.why
		rs.PeerId, rs.Ops, rs.BytesPut, rs.BytesGot, rs.Errors = e.peerID, s.Ops, s.BytesPut, s.BytesGot, s.Errors
		rs.AgeMs = uint64(time.Since(e.since).Milliseconds())
	}
	return rs
}
