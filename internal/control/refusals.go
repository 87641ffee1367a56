package control

import (
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/extensions"
)

// Refusal reasons, as counted in status (StatusResponse.refusals). The
// actor package re-exports them as actor.Refused*.
const (
	// RefusedForgedSender: an envelope from the network whose sender
	// claims one of our own addresses, an address off the host the
	// connection comes from, or an address other than the one the
	// connection already spoke for.
	RefusedForgedSender = "forged_sender"
	// RefusedForeignTarget: an envelope from the network addressed to an
	// actor in another process (protoactor would relay it).
	RefusedForeignTarget = "foreign_target"
	// RefusedMalformed: a malformed batch ended a peer's stream.
	RefusedMalformed = "malformed"
	// RefusedStopActor: a peer asked to stop one of our actors.
	RefusedStopActor = "stop_actor"
	// RefusedUnknownType: a message of a type this binary does not know.
	RefusedUnknownType = "unknown_type"
	// RefusedNotLocal: a peer asked for something only local callers get
	// (a queue pair, hence a route to an address it names).
	RefusedNotLocal = "not_local"
	// RefusedLimit: a request over a registry, remote or route cap.
	RefusedLimit = "limit"
	// RefusedHandshake: a route handshake refused (authentication,
	// replay, rate).
	RefusedHandshake = "handshake"
	// RefusedConn: a gRPC connection over the connection caps.
	RefusedConn = "grpc_conn"
	// RefusedStream: a gRPC stream over the stream cap.
	RefusedStream = "grpc_stream"
	// RefusedTLS: a peer failed the control plane's TLS handshake (no
	// certificate, one from another CA, no TLS at all).
	RefusedTLS = "tls"
	// RefusedSecret: a peer did not prove the shared secret on a control
	// connection (a control plane without TLS, sealed by --secret-file).
	RefusedSecret = "secret"
)

// Book counts refusals by reason and writes their log lines sampled: at
// most LogBurst lines per reason per logPeriod, the next line after a quiet
// spell saying how many were left out. One per actor system, shared by the
// remote guard and the manager (an actor-system extension).
type Book struct {
	log *slog.Logger

	mu     sync.Mutex // guards the fields below
	counts map[string]*atomic.Uint64
	window map[string]*logWindow
}

type logWindow struct {
	start      time.Time
	logged     int
	suppressed uint64
}

const (
	// LogBurst is how many refusals of one reason are logged per period.
	LogBurst  = 5
	logPeriod = 10 * time.Second
)

var bookExtension = extensions.NextExtensionID()

// ExtensionID makes a Book an actor-system extension.
func (r *Book) ExtensionID() extensions.ExtensionID { return bookExtension }

// BookOf returns sys's refusal book, making it on first use.
func BookOf(sys *protoactor.ActorSystem) *Book {
	bookMu.Lock()
	defer bookMu.Unlock()
	if r, ok := sys.Extensions.Get(bookExtension).(*Book); ok {
		return r
	}
	r := &Book{log: sys.Logger(), counts: make(map[string]*atomic.Uint64), window: make(map[string]*logWindow)}
	sys.Extensions.Register(r)
	return r
}

var bookMu sync.Mutex // serialises BookOf's check and register

// SetLogger sends refusal logs to log (the manager's logger).
func (r *Book) SetLogger(log *slog.Logger) {
	r.mu.Lock()
	r.log = log
	r.mu.Unlock()
}

// Refuse counts one refusal of reason and logs it if the sample allows.
func (r *Book) Refuse(reason, msg string, args ...any) {
	r.mu.Lock()
	c := r.counts[reason]
	if c == nil {
		c = new(atomic.Uint64)
		r.counts[reason] = c
	}
	c.Add(1)
	w := r.window[reason]
	if w == nil {
		w = &logWindow{}
		r.window[reason] = w
	}
	now := time.Now()
	if now.Sub(w.start) >= logPeriod {
		w.start, w.logged = now, 0
	}
	log := w.logged < LogBurst
	var left uint64
	if log {
		w.logged++
		left, w.suppressed = w.suppressed, 0
	} else {
		w.suppressed++
	}
	logger := r.log
	r.mu.Unlock()
	if !log {
		return
	}
	args = append(args, "refused", reason)
	if left > 0 {
		args = append(args, "not_logged_before", left)
	}
	logger.Warn(msg, args...)
}

// Snapshot returns the counts by reason.
func (r *Book) Snapshot() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]uint64, len(r.counts))
	for k, c := range maps.All(r.counts) {
		out[k] = c.Load()
	}
	return out
}
