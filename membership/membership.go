// Package membership keeps the members of an rdmamgr cluster in etcd.
//
// A manager registers under /rdmamgr/CLUSTER/members/NAME with a lease
// (default TTL 5 s) that it keeps alive; callers look peers up by name, list
// the members and watch them leave. A member that stops cleanly revokes its
// lease and leaves at once; one that dies leaves when its lease runs out,
// within the TTL. etcd is the only moving part: when it goes away, routes
// that are up keep working (nothing here touches them), lookups fail, and
// the registration is made again once etcd is back.
//
// The one idea: membership says where a name lives and when it is gone;
// it grants nothing. The control plane's mutual TLS decides who may talk. A
// name is an identity (sign.go): with an Identity a member signs its
// record with its certificate's key and registers only under the name that
// certificate carries; with Roots, followers accept only records that
// verify, so a writer to etcd cannot point a name elsewhere. A member
// restores its record when another writer overwrites or removes it
// (defend.go), and followers drop a member's routes only when its record
// stays gone for LeaveGrace (follow.go). Give etcd TLS with client
// certificates (Config.TLS) so that only members write at all.
//
// It uses go.etcd.io/etcd/client/v3 directly rather than protoactor's
// cluster (which would bring grains, identity lookup and gossip we do not
// use, and its own copy of the same client).
package membership

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rdmamgr/rdmamgr"
)

// DefaultTTL is a member's lease.
const DefaultTTL = 5 * time.Second

// Member is what a manager publishes about itself.
type Member struct {
	Name    string `json:"name"`
	Address string `json:"address"` // actor-system address, host:port
	Manager string `json:"manager"` // actor name of the manager
	Data    string `json:"data,omitempty"`
	ID      string `json:"id,omitempty"`
	// Cert (base64 DER) and Sig (base64) sign the record with the
	// member's own key (sign.go), when the registry has an Identity.
	Cert string `json:"cert,omitempty"`
	Sig  string `json:"sig,omitempty"`
}

// Config says which etcd and which cluster.
type Config struct {
	Endpoints []string // etcd client URLs or host:port
	Cluster   string   // default "default"
	TTL       time.Duration
	// TLS is for the connection to etcd (nil: plain gRPC). Run etcd with
	// --client-cert-auth and the deployment CA, and give each member its
	// own certificate here: then only members can write records.
	TLS *tls.Config
	// Identity, when set, signs our records (its certificate's name must
	// be the member's name). Roots, when set, is the CA records must be
	// signed under: records that do not verify (sign.go) are ignored by
	// List, Watch and Follow, and refused by Lookup with ErrForged.
	Identity *tls.Certificate
	Roots    *x509.CertPool
	// DialTimeout bounds connecting to etcd (5 s).
	DialTimeout time.Duration
	Logger      *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Cluster == "" {
		c.Cluster = "default"
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Registry is a client of one cluster's membership.
type Registry struct {
	cfg Config
	cli *clientv3.Client
}

// Open connects to etcd (waiting at most DialTimeout for it).
func Open(cfg Config) (*Registry, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("membership: no etcd endpoints")
	}
	if strings.ContainsAny(cfg.Cluster, "/") {
		return nil, fmt.Errorf("membership: cluster name %q has a '/'", cfg.Cluster)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		TLS:         cfg.TLS,
		Logger:      zapNop(),
	})
	if err == nil {
		if err = reachable(cli, cfg); err != nil {
			cli.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("membership: etcd %v: %w", cfg.Endpoints, err)
	}
	return &Registry{cfg: cfg, cli: cli}, nil
}

// reachable asks the endpoints for their status until one answers, for at
// most DialTimeout: Open fails at once when etcd is not there (what
// grpc.WithBlock did before gRPC deprecated it).
func reachable(cli *clientv3.Client, cfg Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.DialTimeout)
	defer cancel()
	for {
		var err error
		for _, ep := range cfg.Endpoints {
			if _, err = cli.Status(ctx, ep); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close closes the etcd client.
func (r *Registry) Close() error { return r.cli.Close() }

func (r *Registry) prefix() string { return "/rdmamgr/" + r.cfg.Cluster + "/members/" }

// Lookup returns the member named name.
func (r *Registry) Lookup(ctx context.Context, name string) (Member, error) {
	resp, err := r.cli.Get(ctx, r.prefix()+name)
	if err != nil {
		return Member{}, fmt.Errorf("membership: lookup %q: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return Member{}, fmt.Errorf("%q in cluster %q: %w", name, r.cfg.Cluster, rdmamgr.ErrUnknownPeer)
	}
	return r.decode(string(resp.Kvs[0].Key), resp.Kvs[0].Value)
}

// List returns the members, by name.
func (r *Registry) List(ctx context.Context) ([]Member, error) {
	resp, err := r.cli.Get(ctx, r.prefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("membership: list: %w", err)
	}
	var ms []Member
	for _, kv := range resp.Kvs {
		m, err := r.decode(string(kv.Key), kv.Value)
		if err != nil {
			r.cfg.Logger.Warn("membership: ignored a record", "key", string(kv.Key), "err", err)
			continue
		}
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	return ms, nil
}

// decode decodes and verifies (sign.go) the record under key.
func (r *Registry) decode(key string, v []byte) (Member, error) {
	var m Member
	if err := json.Unmarshal(v, &m); err != nil {
		return Member{}, fmt.Errorf("membership: bad record: %v: %w", err, ErrForged)
	}
	if err := r.verify(strings.TrimPrefix(key, r.prefix()), m); err != nil {
		return Member{}, fmt.Errorf("membership: %w", err)
	}
	return m, nil
}

// Event is a change of membership.
type Event struct {
	Left   bool // false: joined (or moved to a new address)
	Member Member
}

// Watch calls f for every change until ctx ends. A member that registers
// again at a new address is reported as leaving the old one first. It
// returns ctx's error.
func (r *Registry) Watch(ctx context.Context, f func(Event)) error {
	wc := r.cli.Watch(clientv3.WithRequireLeader(ctx), r.prefix(), clientv3.WithPrefix(), clientv3.WithPrevKV())
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case wr, ok := <-wc:
			if !ok || wr.Err() != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				// etcd is away (no leader): routes are untouched; watch
				// again after a pause.
				r.cfg.Logger.Warn("membership watch interrupted; retrying", "err", wr.Err())
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Second):
				}
				wc = r.cli.Watch(clientv3.WithRequireLeader(ctx), r.prefix(), clientv3.WithPrefix(), clientv3.WithPrevKV())
				continue
			}
			for _, ev := range wr.Events {
				var prev *Member
				if ev.PrevKv != nil {
					if m, err := r.decode(string(ev.PrevKv.Key), ev.PrevKv.Value); err == nil {
						prev = &m
					}
				}
				switch ev.Type {
				case clientv3.EventTypeDelete:
					if prev != nil {
						f(Event{Left: true, Member: *prev})
					}
				case clientv3.EventTypePut:
					m, err := r.decode(string(ev.Kv.Key), ev.Kv.Value)
					if err != nil {
						r.cfg.Logger.Warn("membership: ignored a record that does not verify", "key", string(ev.Kv.Key), "err", err)
						continue
					}
					if prev != nil && prev.Address != m.Address {
						f(Event{Left: true, Member: *prev})
					}
					f(Event{Member: m})
				}
			}
		}
	}
}
