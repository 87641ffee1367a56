package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/ibverbs"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// startBackends builds the backends over m's registry and starts them, in
// order of preference: ibverbs when selected and usable, then TCP, which
// every peer reaches. On error it closes what it made.
func startBackends(ctx context.Context, cfg Config, m *actor.Manager, advertised string) ([]backend.Backend, *tcp.Backend, error) {
	log := m.Logger()
	tcfg := cfg.TCP
	tcfg.Secret = cfg.Manager.Secret
	placeData(&tcfg, cfg.Listen, advertised)
	t, err := tcp.New(tcfg, m.Registry(), log)
	if err != nil {
		return nil, nil, err
	}
	var bs []backend.Backend
	if cfg.Backend != backend.KindTCP {
		rb, err := startIBVerbs(ctx, cfg.IBVerbs, m.Registry(), log)
		switch {
		case err == nil:
			bs = append(bs, rb)
		case cfg.Backend == KindAuto && errors.Is(err, ibverbs.ErrNotBuilt):
			log.Info("no RDMA device: using TCP only", "err", err) // the expected state of a build without ibverbs
		case cfg.Backend == KindAuto:
			log.Warn("no usable RDMA device: using TCP only", "err", err)
		default:
			t.Close()
			return nil, nil, err
		}
	}
	if err := t.Start(ctx); err != nil {
		for _, b := range bs {
			b.Close()
		}
		t.Close()
		return nil, nil, err
	}
	return append(bs, t), t, nil
}

func startIBVerbs(ctx context.Context, cfg ibverbs.Config, reg *memreg.Registry, log *slog.Logger) (backend.Backend, error) {
	b, err := ibverbs.New(cfg, reg, log)
	if err != nil {
		return nil, err
	}
	if err := b.Start(ctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("ibverbs: %w", err)
	}
	return b, nil
}

// placeData puts a TCP data listener left at its default address next to
// the actor system: bound to the actor system's bind host (listen), port
// 0, and advertised at the host of its advertised address, so peers on
// other hosts reach it as they reach the actor system.
func placeData(c *tcp.Config, listen, advertised string) {
	if c.ListenAddr != "" || c.AdvertiseAddr != "" || c.AdvertiseHost != "" {
		return
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return
	}
	c.ListenAddr = net.JoinHostPort(host, "0")
	if ah, _, err := net.SplitHostPort(advertised); err == nil {
		c.AdvertiseHost = ah
	}
}
