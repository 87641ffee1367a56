package main

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// statusDoc is what status --json prints: stable snake_case names, sizes
// in bytes, times in seconds.
type statusDoc struct {
	ManagerID       string            `json:"manager_id"`
	Address         string            `json:"address"`
	Version         string            `json:"version"`
	UptimeSeconds   float64           `json:"uptime_s"`
	Backend         string            `json:"backend"`
	DataAddr        string            `json:"data_addr"`
	RegisteredBytes uint64            `json:"registered_bytes"`
	MaxRegistered   uint64            `json:"max_registered_bytes"`
	RemoteBytes     uint64            `json:"remote_bytes"`
	MaxRemote       uint64            `json:"max_remote_bytes"`
	BuffersTotal    uint64            `json:"buffers_total"`
	Goroutines      uint64            `json:"goroutines"`
	LeasedBuffers   uint32            `json:"leased_buffers"`
	QueuePairs      uint32            `json:"queue_pairs"`
	Buffers         []bufferDoc       `json:"buffers"`
	Routes          []routeDoc        `json:"routes"`
	Served          servedDoc         `json:"served"`
	AuthFailures    uint64            `json:"auth_failures"`
	Refusals        map[string]uint64 `json:"refusals"` // by reason
}

type bufferDoc struct {
	Region     uint64 `json:"region"`
	Length     uint64 `json:"length"`
	Access     string `json:"access"`
	UserMemory bool   `json:"user_memory"`
}

type routeDoc struct {
	Direction  string  `json:"direction"` // out: we set it up; in: the peer did
	Peer       string  `json:"peer"`
	PeerID     string  `json:"peer_id"`
	Backend    string  `json:"backend"`
	Why        string  `json:"why"` // why this backend (RouteStatus.why)
	State      string  `json:"state"`
	AgeSeconds float64 `json:"age_s"`
	Refs       uint32  `json:"refs"`
	Ops        uint64  `json:"ops"`
	BytesPut   uint64  `json:"bytes_put"`
	BytesGot   uint64  `json:"bytes_got"`
	Errors     uint64  `json:"errors"`
}

type servedDoc struct {
	Ops      uint64 `json:"ops"`
	BytesIn  uint64 `json:"bytes_in"`
	BytesOut uint64 `json:"bytes_out"`
	Rejected uint64 `json:"rejected"`
}

func statusJSON(st *rdmapb.StatusResponse) statusDoc {
	d := statusDoc{
		ManagerID: fmt.Sprintf("%016x", st.ManagerId), Address: st.Address, Version: st.Version,
		UptimeSeconds: float64(st.UptimeMs) / 1000, Backend: st.Backend, DataAddr: st.DataAddr,
		RegisteredBytes: st.RegisteredBytes, RemoteBytes: st.RemoteBytes, MaxRegistered: st.MaxRegisteredBytes,
		MaxRemote: st.MaxRemoteBytes, BuffersTotal: st.BuffersTotal, Goroutines: st.Goroutines, Refusals: st.Refusals,
		LeasedBuffers: st.LeasedBuffers, QueuePairs: st.QueuePairs,
		Buffers: []bufferDoc{}, Routes: []routeDoc{},
		Served:       servedDoc{Ops: st.ServedOps, BytesIn: st.ServedBytesIn, BytesOut: st.ServedBytesOut, Rejected: st.RejectedOps},
		AuthFailures: st.AuthFailures,
	}
	if d.Refusals == nil {
		d.Refusals = map[string]uint64{}
	}
	for _, b := range st.Buffers {
		d.Buffers = append(d.Buffers, bufferDoc{Region: b.Region, Length: b.Length, Access: buffer.Access(b.Access).String(), UserMemory: b.UserMemory})
	}
	for _, g := range []struct {
		dir string
		rs  []*rdmapb.RouteStatus
	}{{"out", st.Routes}, {"in", st.Inbound}} {
		dir := g.dir
		for _, r := range g.rs {
			d.Routes = append(d.Routes, routeDoc{
				Direction: dir, Peer: r.PeerAddr, PeerID: fmt.Sprintf("%016x", r.PeerId), Backend: r.Backend, Why: r.Why,
				State: r.State, AgeSeconds: float64(r.AgeMs) / 1000, Refs: r.Refs,
				Ops: r.Ops, BytesPut: r.BytesPut, BytesGot: r.BytesGot, Errors: r.Errors,
			})
		}
	}
	return d
}
