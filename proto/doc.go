// Package rdmapb holds the protobuf messages of the rdmamgr control plane:
// the Buffer handle, requests and responses of the RdmaManager actor, the
// manager-to-manager route handshake, the status query and the Error shape
// whose Code callers branch on. The Go code is generated from rdmamgr.proto
// and committed; `go generate ./...` reproduces it with the protoc-gen-go
// version pinned in go.mod.
package rdmapb

//go:generate sh -c "protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --go_out=. --go_opt=paths=source_relative rdmamgr.proto"
