package control

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	protoactor "github.com/asynkron/protoactor-go/actor"
)

// Every refusal is counted, few are logged, and an actor system has one
// book.
func TestRefusalsSampled(t *testing.T) {
	sys := protoactor.NewActorSystem()
	defer sys.Shutdown()
	var out bytes.Buffer
	r := BookOf(sys)
	r.SetLogger(slog.New(slog.NewTextHandler(&out, nil)))
	for range 1000 {
		r.Refuse(RefusedForgedSender, "forged")
		r.Refuse(RefusedLimit, "limit")
	}
	if got := r.Snapshot(); got[RefusedForgedSender] != 1000 || got[RefusedLimit] != 1000 {
		t.Fatalf("counts %v", got)
	}
	if lines := strings.Count(out.String(), "\n"); lines != 2*LogBurst {
		t.Fatalf("%d lines logged, want %d:\n%s", lines, 2*LogBurst, out.String())
	}
	if BookOf(sys) != r {
		t.Fatal("a second refusal book for one actor system")
	}
}
