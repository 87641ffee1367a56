package actor

import (
	"log/slog"

	protoactor "github.com/asynkron/protoactor-go/actor"
)

// NewActorSystem returns a protoactor system whose own logs go to log (nil
// discards them).
func NewActorSystem(log *slog.Logger) *protoactor.ActorSystem {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return protoactor.NewActorSystem(protoactor.WithLoggerFactory(func(*protoactor.ActorSystem) *slog.Logger {
		return log.With("lib", "protoactor")
	}))
}
